// Checkpoint directories of a run, written so that a crash at any moment leaves every
// earlier checkpoint usable:
//
//   OUTPUT/checkpoint-000120/   config.json, model*.safetensors (+ index), tokenizer.json,
//                                optimizer.bin, optimizer_state.json, trainer_state.json,
//                                DONE (written last)
//
// A checkpoint is assembled in OUTPUT/.checkpoint-000120.tmp, its files are flushed to
// disk, DONE is written, and only then is the directory renamed into place. Readers take
// the newest checkpoint-* directory that has DONE; leftovers of an interrupted save
// (*.tmp directories) are removed when the next save starts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace lt {

// The newest complete checkpoint directory under output_dir, if any.
std::optional<std::string> newest_complete_checkpoint(const std::string& output_dir);

// Writes checkpoint `step` by calling write_contents(tmp_dir), then publishes it and
// removes complete checkpoints beyond the newest `keep`. Returns the final directory.
std::string save_checkpoint(const std::string& output_dir, int64_t step, int64_t keep,
                            const std::function<void(const std::string& dir)>& write_contents);

}  // namespace lt
