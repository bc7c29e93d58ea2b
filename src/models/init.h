// Weight initialisers with torch.nn.init's distributions, drawn from (seed, parameter name) so
// a model's initial weights never depend on thread count, rank, or build order. They match
// torch's distributions, not its values (torch's generator is a different one).
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mpicnn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (torch's rule).
int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);

void constant(Tensor& t, real v);
void uniform(Tensor& t, uint64_t seed, const std::string& name, real lo, real hi);
void normal(Tensor& t, uint64_t seed, const std::string& name, real mean, real std);
// trunc_normal_(mean, std, a, b): normal(mean, std) conditioned on [a, b] (absolute bounds, as
// torch's), each out-of-range draw redrawn from the element's next counter.
void trunc_normal(Tensor& t, uint64_t seed, const std::string& name, real mean, real std, real a,
                  real b);
// kaiming_normal_(nonlinearity='relu'): std = sqrt(2 / fan), fan per mode.
void kaiming_normal_relu(Tensor& t, uint64_t seed, const std::string& name, bool fan_out_mode);
// kaiming_uniform_(a=0, relu): bound = sqrt(6 / fan_in).
void kaiming_uniform_relu(Tensor& t, uint64_t seed, const std::string& name);

}  // namespace mpicnn::init
