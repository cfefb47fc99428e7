// Turns a Dataset into fixed-length training rows, in a seeded order, with a position
// that can be saved and restored for an exact resume.
//
// kPack (default): documents are laid end to end (each already ends with EOS) and cut
// into rows of seq_len tokens; a document may continue into the next row. Labels follow
// the documents' own labels, except that a document's first token is never a target, so
// nothing is ever predicted across a document boundary. position_ids restart at 0 at each
// document start, so a model can also restrict attention to the document.
// kPad: one document per row, truncated to seq_len, padded with pad_id (label -100).
//
// Order: epoch e visits the documents in shuffled_order(n, seed, e) (or in file order
// without shuffle); after the last document the next epoch starts.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/jsonl_dataset.h"

namespace lt::data {

// Where the loader stands: the next token is token `offset` of document
// order(epoch)[index].
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t index = 0;
  uint64_t offset = 0;
  nlohmann::json to_json() const;
  // Throws lt::Error on a malformed object.
  static DataPosition from_json(const nlohmann::json& j);
  bool operator==(const DataPosition&) const = default;
};

enum class PackMode { kPack, kPad };

struct LoaderOptions {
  int64_t seq_len = 256;
  uint64_t seed = 0;
  bool shuffle = true;
  PackMode mode = PackMode::kPack;
  int32_t pad_id = 0;  // kPad only
};

// One row: each vector has seq_len entries.
struct PackedRow {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
  std::vector<int32_t> position_ids;
};

// Where each token's document starts in its row, from a batch's position_ids (rows of
// seq_len): a document starts at a row's first token and wherever a position is not its
// predecessor's plus one. For kPack rows that is exactly the documents (a document
// continued from the previous row counts as one starting at the row's start); for kPad
// rows each padding token is a document of its own. The form ModelStep and the
// streaming executor take (doc_start) for block-diagonal attention.
void document_starts(int32_t* doc_start, const int32_t* position_ids, int64_t rows, int64_t seq_len);

class PackedLoader {
 public:
  // Keeps a reference to `dataset`, which must outlive the loader.
  PackedLoader(const Dataset& dataset, const LoaderOptions& options);

  PackedRow next();
  // `rows` rows into caller buffers of rows * seq_len entries each (row-major).
  void next_batch(int64_t rows, int32_t* input_ids, int32_t* labels, int32_t* position_ids);

  DataPosition position() const { return pos_; }
  // Restores a saved position; throws lt::Error when it does not fit this dataset.
  void set_position(const DataPosition& pos);
  uint64_t epoch() const { return pos_.epoch; }
  size_t truncated_documents() const { return truncated_; }  // kPad only

 private:
  void fill(int32_t* ids, int32_t* labels, int32_t* pos);
  void advance_document();
  uint32_t current_document() const { return order_[pos_.index]; }

  const Dataset& data_;
  LoaderOptions opt_;
  DataPosition pos_;
  std::vector<uint32_t> order_;
  size_t truncated_ = 0;
};

}  // namespace lt::data
