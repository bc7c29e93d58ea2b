// Direct convolution, its passes: weights packed into the plan's layouts, inputs packed and
// outputs unpacked, and the kernels of layers/cpu/ threaded over images and units for forward,
// the input gradient and the weight gradient, as conv_direct.cpp planned them. See
// conv_direct.h. Not in the float64 test build (no direct kernels there).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "layers/conv_direct.h"
#include "layers/conv_direct_tiles.h"

namespace mpicnn {

#if !defined(MPICNN_F64) || !MPICNN_F64

using direct::balanced_tile;
using direct::ceil_div;

// out (B images, NCHW) '=' the interleaved blocked buffer b [blocks][plane][chunk][V] + bias.
void DirectConv::unpack(float* out, const float* b, int64_t channels, int64_t plane, int64_t B,
                        const float* bias) const {
  const int64_t V = k_->vec, px = chunk_ * V;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < B; ++i)
    for (int64_t c = 0; c < channels; ++c) {
      const float* s = b + (c / V) * plane * px + i * V + c % V;
      float* d = out + (i * channels + c) * plane;
      const float bv = bias ? bias[c] : 0.f;
      for (int64_t p = 0; p < plane; ++p) d[p] = s[p * px] + bv;
    }
}

// wf [out block][in block][tap][V in][V out] from w (OC, IC, KH, KW), zeros past the channels.
void DirectConv::pack_forward_weights(float* wf, const float* w) const {
  const int64_t V = k_->vec, T = f32_.pass.ntaps, KT = src_taps_, IC = g_.channels;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t kb = 0; kb < out_blocks_; ++kb)
    for (int64_t cb = 0; cb < in_blocks_; ++cb)
      for (int64_t t = 0; t < T; ++t) {
        float* d = wf + ((kb * in_blocks_ + cb) * T + t) * V * V;
        const int32_t id = f32_.ids[size_t(t)];
        for (int64_t li = 0; li < V; ++li)
          for (int64_t lo = 0; lo < V; ++lo) {
            const int64_t oc = kb * V + lo, ic = cb * V + li;
            d[li * V + lo] = oc < oc_ && ic < IC ? w[(oc * IC + ic) * KT + id] : 0.f;
          }
      }
}

// The layer's weights w (OC, IC, KH, KW) rounded by to_bf16 (core/gemm_bf16.h: bf16_round, the
// whole tensor at once), into a buffer kept per thread and grown to the largest layer, as
// gemm_bf16's packing buffers are (a step allocates nothing after the first).
const bf16_t* DirectConv::rounded_weights(const float* w) const {
  static thread_local std::vector<bf16_t> rounded;
  const int64_t n = oc_ * g_.channels * src_taps_;
  if (int64_t(rounded.size()) < n) rounded.resize(size_t(n));
  to_bf16(rounded.data(), w, n);
  return rounded.data();
}

// A bf16 pass's weights, [out block][pair block][tap][V pairs][V out][2] bf16 (taps ids): pass
// output channel o = ob * V + lo and input channel i = pb * 2V + l (pair l / 2, the even channel
// in the low half, as vdpbf16ps pairs them) hold the layer's weight (oc, ic) = (o, i), or (i, o)
// when transposed (the input gradient), from wq (rounded_weights); zeros past the channels.
void DirectConv::pack_pair_weights(float* dst, const bf16_t* wq, int64_t out_blocks,
                                   int64_t pair_blocks, const std::vector<int32_t>& ids,
                                   bool transposed) const {
  const int64_t V = k_->vec, T = int64_t(ids.size()), KT = src_taps_, IC = g_.channels;
  const int64_t outs = transposed ? IC : oc_, ins = transposed ? oc_ : IC;
  // Weight (o, i) of the pass at tap id is wq[o * so + i * si + id].
  const int64_t so = transposed ? KT : IC * KT, si = transposed ? IC * KT : KT;
  bf16_t* const base = reinterpret_cast<bf16_t*>(dst);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t ob = 0; ob < out_blocks; ++ob)
    for (int64_t pb = 0; pb < pair_blocks; ++pb) {
      bf16_t* const unit = base + (ob * pair_blocks + pb) * T * 2 * V * V;
      if ((ob + 1) * V <= outs && (pb + 1) * 2 * V <= ins) {
        // A whole block: one 32-bit word (even channel low) per (pair, output) in output order.
        for (int64_t t = 0; t < T; ++t)
          for (int64_t q = 0; q < V; ++q) {
            const bf16_t* s = wq + ob * V * so + (pb * 2 * V + 2 * q) * si + ids[size_t(t)];
            uint32_t* d = reinterpret_cast<uint32_t*>(unit + (t * V + q) * 2 * V);
            for (int64_t lo = 0; lo < V; ++lo)
              d[lo] = uint32_t(s[lo * so]) | uint32_t(s[lo * so + si]) << 16;
          }
        continue;
      }
      for (int64_t t = 0; t < T; ++t) {  // an edge block: zeros past the channels
        bf16_t* d = unit + t * 2 * V * V;
        const int32_t id = ids[size_t(t)];
        for (int64_t l = 0; l < 2 * V; ++l)
          for (int64_t lo = 0; lo < V; ++lo) {
            const int64_t o = ob * V + lo, i = pb * 2 * V + l;
            d[((l / 2) * V + lo) * 2 + l % 2] =
                o < outs && i < ins ? wq[o * so + i * si + id] : bf16_t(0);
          }
      }
    }
}

// Per phase, wd [in-channel block][out-channel block][tap][V out][V in]: the transposed
// weights, input channels now the pass's outputs (in bf16: pack_pair_weights, transposed).
void DirectConv::pack_data_weights(float* wd, const float* w) const {
  const int64_t V = k_->vec, KT = src_taps_, IC = g_.channels;
  if (data16_.k) {
    const bf16_t* wq = rounded_weights(w);
    for (const Phase& ph : data16_.phases)
      pack_pair_weights(wd + ph.weight_offset, wq, in_blocks_, ph.pass.in_blocks, ph.ids, true);
    return;
  }
  for (const Phase& ph : data32_.phases) {
    const int64_t T = ph.pass.ntaps;
    float* base = wd + ph.weight_offset;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t cb = 0; cb < in_blocks_; ++cb)
      for (int64_t kb = 0; kb < out_blocks_; ++kb)
        for (int64_t t = 0; t < T; ++t) {
          float* d = base + ((cb * out_blocks_ + kb) * T + t) * V * V;
          const int32_t id = ph.ids[size_t(t)];
          for (int64_t li = 0; li < V; ++li)
            for (int64_t lo = 0; lo < V; ++lo) {
              const int64_t oc = kb * V + li, ic = cb * V + lo;
              d[li * V + lo] = oc < oc_ && ic < IC ? w[(oc * IC + ic) * KT + id] : 0.f;
            }
        }
  }
}

// `count` runs of pass p, run i reading in + i * step.in and writing out + i * step.out (one
// per image, or one per pixel column with interleaved images): the runs in parallel, or, with
// fewer runs than threads, each run's (row, block group) units.
void DirectConv::run_pass(const direct::Kernels& k, float* out, const float* in,
                          const direct::Pass& p, const float* bias, int64_t count,
                          Step step) const {
  const int64_t blocks = ceil_div(p.out_channels, k.vec);
  if (count >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i)
      k.pass_rows(out + i * step.out, in + i * step.in, p, bias, 0, p.rows, 0, blocks);
    return;
  }
  const int64_t groups = ceil_div(blocks, p.ob);
  for (int64_t i = 0; i < count; ++i) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t row = 0; row < p.rows; ++row)
      for (int64_t gi = 0; gi < groups; ++gi)
        k.pass_rows(out + i * step.out, in + i * step.in, p, bias, row, row + 1, gi * p.ob,
                    std::min(blocks, (gi + 1) * p.ob));
  }
}

// Packs images [c0, c0 + B) of src into dst as img (after each other, or interleaved).
void DirectConv::pack(const direct::Kernels& k, float* dst, const float* src, int64_t src_image,
                      const direct::BlockedImage& img, const Layout& l, int64_t c0,
                      int64_t B) const {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < B; ++i) k.pack_image(dst + i * l.image, src + (c0 + i) * src_image, img);
}

void DirectConv::forward(float* out, const float* in, const float* w, const float* bias,
                         int64_t n, float* ws) const {
  const Forward& f = fwd();
  const direct::Kernels& k = *f.k;
  float* wf = ws;
  float* images = wf + weight_floats(f);
  if (&f == &bf16_)
    pack_pair_weights(wf, rounded_weights(w), out_blocks_, f.pass.in_blocks, f.ids, false);
  else
    pack_forward_weights(wf, w);
  direct::Pass p = f.pass;
  p.taps = f.taps.data();
  p.weights = wf;
  const int64_t in_image = g_.channels * g_.in_plane(), out_image = oc_ * g_.out_plane();
  if (batch_inner_) {
    float* out_b = images + chunk_ * f.image_floats;  // [KB][OH*OW][chunk][V]
    for (int64_t c0 = 0; c0 < n; c0 += chunk_) {
      const int64_t B = std::min(chunk_, n - c0);
      pack(k, images, in, in_image, f.img, f.l, c0, B);
      p.cols = B;
      p.r = balanced_tile(B, k.max_tile / p.ob);
      run_pass(k, out_b, images, p, nullptr, g_.out_w, f.step);
      unpack(out + c0 * out_image, out_b, oc_, g_.out_plane(), B, bias);
    }
    return;
  }
  if (f.raw) {
    run_pass(k, out, in, p, bias, n, {in_image, out_image});
    return;
  }
  const int64_t packed = f.l.image;
  const int threads = std::min(omp_get_max_threads(), f.slots);
  if (n >= threads) {
    // Each thread packs its images into its own slot and computes them.
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
      float* slot = images + omp_get_thread_num() * packed;
      k.pack_image(slot, in + i * in_image, f.img);
      k.pass_rows(out + i * out_image, slot, p, bias, 0, p.rows, 0, out_blocks_);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    k.pack_image(images, in + i * in_image, f.img);
    run_pass(k, out + i * out_image, images, p, bias, 1, {0, 0});
  }
}

void DirectConv::backward(float* din, float* gw, const float* dout, const float* in,
                          const float* w, int64_t n, float* ws) const {
  const int64_t V = k_->vec, T = f32_.pass.ntaps;
  const int64_t wf_floats = weight_floats(f32_);
  const Data& dp = data();  // the input gradient's plan: fp32, or bf16
  const bool dout16 = &dp == &data16_;
  const bool wg16 = bf16_weight_grad();
  CHECK(!gw || wg16 || !bf16_.k, "DirectConv: planned in bf16 without its weight gradient");
  const direct::Kernels& wk = wg16 ? *wgrad16_.in.k : *k_;  // the weight gradient's kernels
  float* wd = ws;                     // packed transposed weights of every phase
  float* dw = wd + dp.weight_floats;  // [out block][in block][tap][V in][V out]
  float* ins = dw + wf_floats;        // chunk_ packed inputs (none when f32_.raw)
  float* douts = ins + chunk_ * wgrad_in_floats();      // packed gradients
  float* douts16 = douts + chunk_ * wgrad_dout_floats();  // as bf16 channel pairs (dout16)
  // Interleaved images: the input gradient's blocked buffer [CB][H*W][chunk][V].
  float* din_b = douts16 + (dout16 ? chunk_ * dp.image_floats : 0);
  if (din) pack_data_weights(wd, w);
  if (gw) std::memset(dw, 0, sizeof(float) * size_t(wf_floats));
  const int64_t in_image = g_.channels * g_.in_plane(), out_image = oc_ * g_.out_plane();
  const direct::WeightGrad& wgr = wgrad();
  const int64_t units = wk.weight_grad_units(wgr);
  for (int64_t c0 = 0; c0 < n; c0 += chunk_) {
    const int64_t B = std::min(chunk_, n - c0);
    // The weight gradient reads the packed output gradient, and the packed input unless
    // f32_.raw (in bf16 both as pixel pairs); the input gradient's phases read the packed
    // output gradient unless dp.raw, in bf16 its own copy packed as channel pairs.
    if (gw && wg16) {
      const Wgrad16& w16 = wgrad16_;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < B; ++i) {
        wk.pack_pixel_pairs(ins + i * w16.in.l.image, in + (c0 + i) * in_image, w16.in.img, 1,
                            g_.stride_w);
        wk.pack_pixel_pairs(douts + i * w16.dout_l.image, dout + (c0 + i) * out_image,
                            w16.dout_img, 2, 1);
      }
    } else if (gw || (din && !dp.raw && !dout16)) {
      pack(*k_, douts, dout, out_image, dout_img_, dpk_l_, c0, B);
    }
    if (din && dout16) pack(*dp.k, douts16, dout, out_image, dp.img, dp.l, c0, B);
    if (gw && !wg16 && !f32_.raw) pack(*k_, ins, in, in_image, f32_.img, f32_.l, c0, B);
    if (din) {
      float* d = din + c0 * in_image;
      float* target = batch_inner_ ? din_b : d;
      const int64_t target_floats = batch_inner_ ? chunk_ * in_blocks_ * g_.in_plane() * V
                                                 : B * in_image;
      if (data_zero_first_) std::memset(target, 0, sizeof(float) * size_t(target_floats));
      const float* src = dp.raw ? dout + c0 * out_image : dout16 ? douts16 : douts;
      for (const Phase& ph : dp.phases) {
        direct::Pass p = ph.pass;
        p.taps = ph.taps.data();
        p.weights = wd + ph.weight_offset;
        if (batch_inner_) {
          p.cols = B;
          p.r = balanced_tile(B, dp.k->max_tile / p.ob);
          run_pass(*dp.k, din_b, src, p, nullptr, ph.columns, ph.step);
        } else {
          run_pass(*dp.k, d, src, p, nullptr, B, {dp.l.image, in_image});
        }
      }
      if (batch_inner_) unpack(d, din_b, g_.channels, g_.in_plane(), B, nullptr);
    }
    if (gw) {
      direct::WeightGrad g = wgr;
      g.taps = wg16 ? wgrad16_.in.taps.data() : f32_.taps.data();
      const float* x = !wg16 && f32_.raw ? in + c0 * in_image : ins;
      if (wgrad_units_outer_) {
        // Each unit runs through the chunk's images at once.
#pragma omp parallel for schedule(static)
        for (int64_t u = 0; u < units; ++u) wk.weight_grad(dw, x, douts, g, u, B);
      } else {
        // Large planes, small dw: all units over one image (held in cache), then the next.
#pragma omp parallel
        for (int64_t i = 0; i < B; ++i) {
#pragma omp for schedule(static)
          for (int64_t u = 0; u < units; ++u)
            wk.weight_grad(dw, x + i * g.in_image, douts + i * g.out_image, g, u, 1);
        }
      }
    }
  }
  if (!gw) return;
  const int64_t IC = g_.channels, KT = src_taps_;
#pragma omp parallel for schedule(static)
  for (int64_t oc = 0; oc < oc_; ++oc) {
    const int64_t kb = oc / V, lo = oc % V;
    for (int64_t ic = 0; ic < IC; ++ic) {
      const int64_t cb = ic / V, li = ic % V;
      float* d = gw + (oc * IC + ic) * KT;
      const float* s = dw + ((kb * in_blocks_ + cb) * T) * V * V + li * V + lo;
      for (int64_t t = 0; t < T; ++t) d[f32_.ids[size_t(t)]] += s[t * V * V];
    }
  }
}

#endif  // MPICNN_F64

}  // namespace mpicnn
