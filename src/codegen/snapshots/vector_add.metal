#include <metal_stdlib>
using namespace metal;
// ---- body ----
  const uint tm_lid = thread_index_in_threadgroup;
  const int pid0_ = int(threadgroup_position_in_grid.x);
  const int mul = (pid0_ * 1024);
  int arange[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    const uint tm_l = (tm_i & 3u) | (tm_lid << 2) | ((tm_i >> 2) << 9);
    arange[tm_i] = int(tm_l);
  }
  int add[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    add[tm_i] = (mul + arange[tm_i]);
  }
  bool lt[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    lt[tm_i] = (add[tm_i] < n_elements);
  }
  int x_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    x_off[tm_i] = int(add[tm_i]);
  }
  float x[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    x[tm_i] = (lt[tm_i]) ? x_ptr[x_off[tm_i]] : float(0);
  }
  int y_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    y_off[tm_i] = int(add[tm_i]);
  }
  float y[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    y[tm_i] = (lt[tm_i]) ? y_ptr[y_off[tm_i]] : float(0);
  }
  int out_off[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    out_off[tm_i] = int(add[tm_i]);
  }
  float add_1[8];
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    add_1[tm_i] = (x[tm_i] + y[tm_i]);
  }
  for (uint tm_i = 0; tm_i < 8u; ++tm_i) {
    if (lt[tm_i]) out_ptr[out_off[tm_i]] = add_1[tm_i];
  }
