// What the CPU and GPU tests of the per-layer profile (core/profile.h) both check of the rows of
// one profiled forward and backward of a model.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/profile.h"
#include "models/model.h"
#include "testing.h"

namespace mpicnn::testing {

// Every row is a layer of `m`, called once each way, or a residual block's `relu.` (its
// unfused ReLUs and its residual add + ReLU: torchvision's one `relu` of the block, several
// calls); every layer has its row but the ReLUs a BatchNorm applies (ExecConfig::fusion); the
// network's first layer comes first; no time is negative.
inline void check_profile_rows(const std::vector<profile::Row>& rows, Model& m) {
  std::map<std::string, std::string> layers;  // name -> kind, of every layer the model has
  m.root().for_each_layer([&](Layer& l, const std::string& name) { layers[name] = l.kind(); });
  REQUIRE(!rows.empty());
  CHECK(rows.front().name == "conv1.");  // first-call order: the network's
  std::set<std::string> profiled;
  for (const profile::Row& r : rows) {
    INFO(r.name, " (", r.kind, ")");
    profiled.insert(r.name);
    if (r.kind == "ReLU" && layers.count(r.name) == 0) {
      // Fused (ExecConfig::fusion), the last BatchNorm applies the add and the ReLU forward, and
      // only the backward's ReLU mask is the block's.
      CHECK(r.name.ends_with(".relu."));
      CHECK(r.backward_calls >= 1);
      CHECK((r.forward_calls == 0 || r.forward_calls == r.backward_calls));
    } else {
      REQUIRE(layers.count(r.name) == 1);
      CHECK(layers[r.name] == r.kind);
      CHECK(r.forward_calls == 1);
      CHECK(r.backward_calls == 1);
    }
    CHECK((r.forward_s >= 0 && r.backward_s >= 0));
  }
  for (auto& [name, kind] : layers)
    if (kind != std::string("ReLU")) CHECK_MESSAGE(profiled.count(name) == 1, name, " (", kind, ") has no row");
}

}  // namespace mpicnn::testing
