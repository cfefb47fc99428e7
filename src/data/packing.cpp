#include "data/packing.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/shuffle.h"

namespace lt::data {

nlohmann::json DataPosition::to_json() const { return {{"epoch", epoch}, {"index", index}, {"offset", offset}}; }

DataPosition DataPosition::from_json(const nlohmann::json& j) {
  DataPosition p;
  for (const char* k : {"epoch", "index", "offset"})
    if (!j.is_object() || !j.contains(k) || !j[k].is_number_unsigned())
      throw Error(std::string("data position lacks a non-negative integer \"") + k + "\"", "data position JSON",
                  "the checkpoint's data state is damaged");
  p.epoch = j["epoch"];
  p.index = j["index"];
  p.offset = j["offset"];
  return p;
}

namespace {

std::vector<uint32_t> order_for(size_t n, const LoaderOptions& o, uint64_t epoch) {
  if (o.shuffle) return shuffled_order(static_cast<uint32_t>(n), o.seed, epoch);
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

}  // namespace

PackedLoader::PackedLoader(const Dataset& dataset, const LoaderOptions& options) : data_(dataset), opt_(options) {
  if (opt_.seq_len < 2)
    throw Error("seq_len " + std::to_string(opt_.seq_len) + " is too short", "data loader options", "use at least 2");
  if (data_.size() == 0) throw Error("the dataset is empty", "data loader", "");
  if (data_.size() > UINT32_MAX) throw Error("too many documents", "data loader", "split the dataset");
  order_ = order_for(data_.size(), opt_, 0);
}

void PackedLoader::set_position(const DataPosition& p) {
  if (p.index >= data_.size())
    throw Error("saved data position index " + std::to_string(p.index) + " is past the dataset's " +
                    std::to_string(data_.size()) + " documents",
                "data position", "resume with the same dataset and options");
  order_ = order_for(data_.size(), opt_, p.epoch);
  if (p.offset >= data_.ids(order_[p.index]).size())
    throw Error("saved data position offset is past its document", "data position",
                "resume with the same dataset, tokenizer and options");
  pos_ = p;
}

void PackedLoader::advance_document() {
  pos_.offset = 0;
  if (++pos_.index == data_.size()) {
    pos_.index = 0;
    ++pos_.epoch;
    order_ = order_for(data_.size(), opt_, pos_.epoch);
  }
}

void PackedLoader::fill(int32_t* ids, int32_t* labels, int32_t* pos) {
  const int64_t n = opt_.seq_len;
  if (opt_.mode == PackMode::kPad) {
    auto doc_ids = data_.ids(current_document());
    auto doc_labels = data_.labels(current_document());
    int64_t len = std::min<int64_t>(n, static_cast<int64_t>(doc_ids.size()));
    if (static_cast<int64_t>(doc_ids.size()) > n) ++truncated_;
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = i < len ? doc_ids[i] : opt_.pad_id;
      labels[i] = i < len ? doc_labels[i] : kIgnoreLabel;
      pos[i] = static_cast<int32_t>(i < len ? i : 0);
    }
    advance_document();
    return;
  }
  int64_t i = 0;
  while (i < n) {
    auto doc_ids = data_.ids(current_document());
    auto doc_labels = data_.labels(current_document());
    const int64_t take = std::min<int64_t>(n - i, static_cast<int64_t>(doc_ids.size() - pos_.offset));
    for (int64_t k = 0; k < take; ++k) {
      const uint64_t t = pos_.offset + k;
      ids[i + k] = doc_ids[t];
      // The dataset already masks each document's first token; keep that explicit here,
      // since it is what stops a prediction across the boundary.
      labels[i + k] = t == 0 ? kIgnoreLabel : doc_labels[t];
      pos[i + k] = static_cast<int32_t>(t);
    }
    i += take;
    pos_.offset += take;
    if (pos_.offset == doc_ids.size()) advance_document();
  }
}

void document_starts(int32_t* doc_start, const int32_t* position_ids, int64_t rows, int64_t seq_len) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* pos = position_ids + r * seq_len;
    int32_t* ds = doc_start + r * seq_len;
    for (int64_t i = 0; i < seq_len; ++i)
      ds[i] = i > 0 && pos[i] == pos[i - 1] + 1 ? ds[i - 1] : static_cast<int32_t>(i);
  }
}

PackedRow PackedLoader::next() {
  PackedRow r;
  r.input_ids.resize(opt_.seq_len);
  r.labels.resize(opt_.seq_len);
  r.position_ids.resize(opt_.seq_len);
  fill(r.input_ids.data(), r.labels.data(), r.position_ids.data());
  return r;
}

void PackedLoader::next_batch(int64_t rows, int32_t* input_ids, int32_t* labels, int32_t* position_ids) {
  for (int64_t r = 0; r < rows; ++r)
    fill(input_ids + r * opt_.seq_len, labels + r * opt_.seq_len, position_ids + r * opt_.seq_len);
}

}  // namespace lt::data
