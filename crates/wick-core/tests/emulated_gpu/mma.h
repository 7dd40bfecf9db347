// The emulated GPU's warp matrix operations (emu.hpp): the int8 16×16×16 shapes of CUDA's
// nvcuda::wmma that the kernels use. A fragment's layout across the lanes is the hardware's
// secret, so here every lane holds the whole tile, and each operation is a warp collective
// (all 32 lanes, as the API demands) with the API's pointer rules checked: 256-bit aligned,
// the leading dimension a multiple of 16 bytes.
#pragma once

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulated wmma takes 16x16x16 only");
  T v[16][16];  // A: [row][k], B: [k][col], accumulator: [row][col]
};

inline void check(const void* p, unsigned ldm, size_t elem) {
  if ((uintptr_t)p % 32 != 0) wick_emu::fail("wmma: a tile pointer not 256-bit aligned");
  if (ldm * elem % 16 != 0) wick_emu::fail("wmma: a leading dimension not a multiple of 16 bytes");
}

// A warp-wide load: when the last lane arrives, every lane's fragment filled from the tile
// (which all lanes must name alike) through `at(f, r, c)`.
template <class Frag, class T, class At>
inline void load_tile(Frag& f, const T* p, unsigned ldm, At at) {
  check(p, ldm, sizeof(T));
  wick_emu::lane_slot(wick_emu::me().lane) = &f;
  wick_emu::warp_collective([&] {
    for (int l = 0; l < 32; l++) {
      Frag& each = *(Frag*)wick_emu::lane_slot(l);
      for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) each.v[r][c] = at(r, c);
    }
  });
}

template <class T, class L>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  const bool row = std::is_same<L, row_major>::value;
  load_tile(f, p, ldm, [&](int i, int k) { return row ? p[i * ldm + k] : p[k * ldm + i]; });
}

template <class T, class L>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  const bool row = std::is_same<L, row_major>::value;
  load_tile(f, p, ldm, [&](int k, int j) { return row ? p[k * ldm + j] : p[j * ldm + k]; });
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, int>& f, int value) {
  for (auto& r : f.v)
    for (int& x : r) x = value;
}

template <class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, int>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, int>& c) {
  wick_emu::warp_barrier();  // the warp converged; registers only, each lane its own
  int out[16][16];
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      int s = c.v[i][j];
      for (int k = 0; k < 16; k++) s += (int)a.v[i][k] * (int)b.v[k][j];
      out[i][j] = s;
    }
  memcpy(d.v, out, sizeof out);
}

inline void store_matrix_sync(int* p, const fragment<accumulator, 16, 16, 16, int>& f, unsigned ldm, layout_t l) {
  check(p, ldm, sizeof(int));
  // Every lane holds the tile: written from lane 0's when the warp executes the store.
  wick_emu::lane_slot(wick_emu::me().lane) = (void*)&f;
  wick_emu::warp_collective([&] {
    const auto& tile = *(const fragment<accumulator, 16, 16, 16, int>*)wick_emu::lane_slot(0);
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) (l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = tile.v[i][j];
  });
}

}  // namespace wmma
}  // namespace nvcuda
