// One warp-wide tensor-core product, bf16 operands and fp32 accumulation, and the
// warp-wide loads of its fragments from shared memory (sm_80 and later). Included by .cu
// files only; tests/kernels/warp_emulator.h defines the same functions for kernels run on
// the CPU.
#pragma once

#include <cstdint>

namespace lt::cuda {

// d = a * b + d, one m16n8k16 product: a 16x16 row-major, b 16x8 column-major, bf16 pairs
// per 32-bit register; d 16x8 fp32. Fragment layouts (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
//   a[0]: row g, columns 2t, 2t+1; a[1]: row g+8, the same; a[2], a[3]: columns + 8.
//   b0: rows (k) 2t, 2t+1 of column (n) g; b1: rows + 8.
//   d[0], d[1]: row g, columns 2t, 2t+1; d[2], d[3]: row g+8.
// The lower half of each register holds the element of lower index.
__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory into fragments, one instruction for the warp
// (ldmatrix.m8n8.x4): lane l gives the address of row l % 8 of matrix l / 8 (16 bytes,
// 16-byte aligned) and receives in r[m] the two elements of matrix m's row l / 4 at columns
// 2 (l % 4), + 1 (the lower in the lower half): an mma fragment's layout, so four 32-bit
// shared loads a lane become one. The _trans form transposes each matrix on the way: r[m]
// holds rows 2 (l % 4) and + 1 of its column l / 4, a B fragment of a matrix stored [k][n].
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared));
}

}  // namespace lt::cuda
