// Integer helpers that the direct convolution's plan (conv_direct.cpp) and its passes
// (conv_direct_run.cpp) share.
#pragma once
#include <cstdint>

namespace mpicnn::direct {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tile width for a row of `cols` pixels, at most `most`: equal tiles (a row of 16 gives two
// tiles of 8, not 14 + a 2-pixel tile whose few accumulators run at a fraction of the speed).
inline int64_t balanced_tile(int64_t cols, int64_t most) {
  const int64_t tiles = ceil_div(cols, most);
  return ceil_div(cols, tiles);
}

}  // namespace mpicnn::direct
