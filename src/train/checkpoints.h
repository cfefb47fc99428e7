// Checkpoint directories of a run, written so that a crash at any moment leaves every
// earlier checkpoint usable:
//
//   OUTPUT/checkpoint-000120/   config.json, model*.safetensors (+ index), tokenizer.json,
//                                optimizer.bin, optimizer_state.json, trainer_state.json,
//                                DONE (written last)
//
// A checkpoint is assembled in OUTPUT/.checkpoint-000120.tmp, its files are flushed to
// disk, DONE is written, and only then is the directory renamed into place. Readers take
// the newest checkpoint-* directory that has DONE. Old checkpoints are retired by a rename
// to a hidden .checkpoint-*.old name before they are deleted, so a crash never leaves a
// half-deleted checkpoint-* directory; the leftovers of an interrupted save (*.tmp) or
// rotation (*.old) are removed by clean_up_checkpoints, at the start of a run and around
// every save. A save that fails (a full disk) removes its partial directory and rethrows.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lt {

// Creates output_dir if needed; lt::Error now (before any step) if it is a file, cannot
// be created, or cannot be written in.
void prepare_output_dir(const std::string& output_dir);

// Removes interrupted saves and rotations, checkpoint-* directories without DONE, and
// complete checkpoints beyond the newest `keep`.
void clean_up_checkpoints(const std::string& output_dir, int64_t keep);

// A count read from a checkpoint's JSON state (`key` of `j`): an integer in [0, max], else
// lt::Error naming the file and key (a float or an out-of-range number would otherwise
// convert with undefined behaviour, and a resumed run could count steps from -9e18).
int64_t checkpoint_count(const nlohmann::json& j, const char* key, int64_t max, const std::string& path);

// The newest complete checkpoint directory under output_dir, if any.
std::optional<std::string> newest_complete_checkpoint(const std::string& output_dir);

// Writes checkpoint `step` by calling write_contents(tmp_dir), then publishes it and
// removes complete checkpoints beyond the newest `keep`. Returns the final directory.
std::string save_checkpoint(const std::string& output_dir, int64_t step, int64_t keep,
                            const std::function<void(const std::string& dir)>& write_contents);

}  // namespace lt
