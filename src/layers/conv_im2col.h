// The im2col + GEMM convolution (conv_engine.h): the CPU's reference and fallback (grouped
// layers, the float64 build, MPICNN_CONV=im2col), float32 or bf16 (core/gemm_bf16.h); also the
// weight gradient beside the direct kernels' bf16 forward and beside Winograd. Per chunk of
// images: im2col into one column matrix, then per group
//   forward          rows (OCg, B*P)  = W_g (OCg, Kg) * col_g (Kg, B*P)
//   backward weight  dW_g (OCg, Kg)  += dy_g (OCg, B*P) * col_g^T
//   backward data    dcol_g (Kg, B*P) = W_g^T * dy_g, then col2im
// with P = OH*OW and Kg = IC/groups*T, T the kernel taps that read any input pixel (taps that
// only ever read padding are dropped: see ColumnPlan in im2col.h). Chunking several images
// into one GEMM keeps the GEMMs wide for deep layers with tiny planes (7x7); the rows buffer
// converts between the GEMM's (OC, B*P) layout and NCHW. OpenMP parallelises the loops here,
// OpenBLAS the GEMMs; small layers instead run their chunks side by side, one thread per chunk
// (parallel_chunks). In bf16 a 1x1 layer with planes of 64+ pixels runs all three passes as
// one GEMM per image (forward and the input gradient on weights packed once; per_image),
// without the column and rows copies, an image per thread; bf16 layers in several chunks run
// them side by side too (grad_groups). Every rule is on the geometry alone, never on the thread
// count, so the bits are the same for any number of threads.
#pragma once
#include <string>

#include "layers/conv_engine.h"

namespace mpicnn {

// Which passes an Im2colEngine runs.
enum class Im2colPasses : uint8_t {
  kAll,
  kWeightGradBesideDirect,    // bf16: the weight gradient only (never one GEMM per image)
  kWeightGradBesideWinograd,  // float32: the weight gradient only (chunks never side by side)
};

class Im2colEngine final : public ConvEngine {
 public:
  // An Error for an input too large for 32-bit GEMM sizes.
  Im2colEngine(const ConvSpec& s, const ExecConfig& cfg,
               Im2colPasses passes = Im2colPasses::kAll);
  void forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) override;
  // gb must be null (the bias gradient is its owner's) beside other kernels.
  void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout, const Tensor& in,
                const Tensor& weight) override;
  std::string note() const override;
  const Im2colEngine* im2col() const override { return this; }

  int64_t chunk() const { return chunk_; }  // images per GEMM
  const ColumnPlan& columns() const { return cols_; }
  bool parallel_chunks() const { return parallel_chunks_; }
  bool per_image() const { return per_image_; }
  int64_t grad_groups() const { return grad_groups_; }
  int64_t workspace_floats() const { return workspace_floats_; }

 private:
  real* workspace() const { return conv_workspace(workspace_floats_); }
  // The GEMMs' (OC, IC/groups * live taps) weight matrix: the weights themselves when every
  // tap is live, else their live columns gathered into live_weight_.
  const real* gemm_weight(const Tensor& weight);
  // One chunk of images from n0 (at most chunk_ images): forward's GEMMs, and backward's
  // weight gradient into gw ('= beta * gw +', skipped when null) and input gradient (if data).
  void forward_chunk(Tensor& out, const Tensor& in, const real* w, const real* b, int64_t n0);
  void backward_chunk(Tensor& din, const Tensor& dout, const Tensor& in, const real* w, real* gw,
                      real beta, bool data, int64_t n0);
  void forward_per_image(Tensor& out, const Tensor& in, const Tensor& weight, const real* b);
  void backward_per_image(Tensor& din, Tensor* gw, const Tensor& dout, const Tensor& in,
                          const Tensor& weight);
  void weight_grad_per_image(Tensor& gw, const Tensor& dout, const Tensor& in);

  ConvSpec s_;
  Precision precision_;
  ColumnPlan cols_;    // how s_.geo is unfolded (live taps, small-plane table)
  int64_t chunk_ = 1;  // images per GEMM
  // The column matrix (IC*T, chunk*OH*OW), 0 floats when the input is its own column, and the
  // GEMM output/gradient rows (OC, chunk*OH*OW) when chunk > 1, both in the workspace.
  int64_t col_floats_ = 0, rows_floats_ = 0;
  int64_t workspace_floats_ = 0;
  // Small layers: the chunks run in parallel, one thread each, rather than one chunk at a time
  // on multi-threaded GEMMs; chunk_grads_ (chunks, OC, IC/groups * live taps) holds each
  // chunk's weight gradient until they are summed in chunk order.
  bool parallel_chunks_ = false;
  Tensor chunk_grads_;
  // bf16 layers that run in chunks but are not small: the chunks side by side too when they
  // share out over the threads (one thread each; the weight gradient in grad_groups_ fixed
  // groups of chunks, each summed apart into a shared buffer, then added in group order);
  // 0 groups: one chunk at a time on all threads.
  int64_t grad_groups_ = 0;
  // bf16 1x1 layers (stride 1, ungrouped) with planes of kPerImagePlane pixels or more: all
  // three passes as one GEMM per image straight from and to NCHW, not chunked through the
  // column and rows buffers; forward and the input gradient on the weights (or their
  // transpose) packed once per pass into the workspace (core/gemm_bf16.h's
  // gemm_bf16_packed_a), giving the chunked GEMMs' bits; the weight gradient summed image by
  // image in fixed groups of images (weight_grad_per_image: K = one image's pixels per GEMM, so
  // its bits are its own). Images run one per thread when there are enough of them.
  bool per_image_ = false;
  Tensor live_weight_, live_grad_;  // (OC, IC/groups * live taps), only when a tap is dead
};

}  // namespace mpicnn
