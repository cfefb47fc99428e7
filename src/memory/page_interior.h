// The whole pages inside a byte range, and giving them back to the kernel: how host
// memory stops holding paged tensors (train/master_pages.h's masters, and the paged
// layers' parts of the gradient block and the bf16 compute copy, whose bytes live in
// staging and on NVMe instead). A released page keeps its address and reads as zeros
// until it is written (madvise(MADV_DONTNEED) on private anonymous memory, which every
// host block here is); the partial pages at a range's ends stay resident.
#pragma once

#include <cstddef>
#include <string>

namespace lt {

struct PageSpan {
  std::byte* begin = nullptr;
  size_t bytes = 0;  // a multiple of the page size (0: no whole page inside)
};

// The whole pages inside [data, data + bytes).
PageSpan page_interior(void* data, size_t bytes);
// The pages covering [data, data + bytes): from the start of the page holding its first
// byte to the end of the page holding its last (empty for bytes == 0). A paged range's
// copy elsewhere (an NVMe slot) keeps this layout, so that the range lies there whole
// and in one piece: its interior at the same offset from the cover's start, its partial
// ends beside it.
PageSpan page_cover(void* data, size_t bytes);

// Gives the span's pages back to the kernel; lt::Error naming `what` if it refuses.
void release_pages(PageSpan span, const std::string& what);

}  // namespace lt
