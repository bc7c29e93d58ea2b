// The per-rank stage loop of ./pipeline_eval (see pipeline.h). Each rank runs a contiguous
// range of stages [first, last] (eval/layout.h); items (raw samples, resized windows, batches,
// gaps where a skipped sample was, the end marker) enter at `first`, pass through the rank's
// stages in one call chain and leave towards a rank of the next group, which grants credits
// for them. What each stage does is the task's (eval/task.h); the items are the same types for
// every task.
#include "eval/pipeline.h"

#include <algorithm>
#include <time.h>

#include <chrono>
#include <deque>
#include <map>
#include <utility>
#include <optional>
#include <variant>

#include "core/check.h"
#include "core/fault.h"
#include "core/timer.h"
#include "dist/messenger.h"

namespace mpicnn::eval {

namespace {

enum Tag : int { kData = 1, kCredit, kResults, kSkip, kDone };
enum ItemKind : uint8_t { kRaw, kWindow, kBatch, kEnd, kGap };

struct End {};
// Where sample `index` was skipped (--skip-bad): it still counts towards its block, so the
// batching rank knows when the block is complete.
struct Gap {
  uint64_t index = 0;
};
using Item = std::variant<RawSample, Window, InputBatch, Gap, End>;

// The sample an item carries (batches and the end marker carry none).
std::optional<uint64_t> sample_of(const Item& x) {
  if (const auto* r = std::get_if<RawSample>(&x)) return r->index;
  if (const auto* w = std::get_if<Window>(&x)) return w->index;
  if (const auto* g = std::get_if<Gap>(&x)) return g->index;
  return std::nullopt;
}

void put_sizes(dist::ByteWriter& w, const std::vector<detect::Size2>& sizes) {
  std::vector<int64_t> flat;
  for (const detect::Size2& s : sizes) flat.push_back(s.h), flat.push_back(s.w);
  w.put_vector(flat);
}

std::vector<detect::Size2> get_sizes(dist::ByteReader& r) {
  const std::vector<int64_t> flat = r.get_vector<int64_t>();
  std::vector<detect::Size2> out;
  for (size_t i = 0; i + 1 < flat.size(); i += 2) out.push_back({flat[i], flat[i + 1]});
  return out;
}

std::vector<uint8_t> encode_results(const Results& res) {
  dist::ByteWriter w;
  w.put_vector(res.predictions);
  w.put(uint64_t(res.detections.size()));
  for (const ImageDetections& d : res.detections)
    w.put(d.index).put(d.height).put(d.width).put_vector(d.boxes).put_vector(d.labels).put_vector(d.scores);
  return w.take();
}

Results decode_results(const std::vector<uint8_t>& bytes) {
  dist::ByteReader r(bytes);
  Results res;
  res.predictions = r.get_vector<Prediction>();
  res.detections.resize(size_t(r.get<uint64_t>()));
  for (ImageDetections& d : res.detections) {
    d.index = r.get<uint64_t>();
    d.height = r.get<int64_t>();
    d.width = r.get<int64_t>();
    d.boxes = r.get_vector<float>();
    d.labels = r.get_vector<int64_t>();
    d.scores = r.get_vector<float>();
  }
  return res;
}

std::vector<uint8_t> encode(const Item& item) {
  dist::ByteWriter w;
  if (const auto* r = std::get_if<RawSample>(&item)) {
    w.put(kRaw).put(r->index).put(r->label).put(r->source).put_vector(r->bytes).put(r->height).put(r->width);
  } else if (const auto* win = std::get_if<Window>(&item)) {
    const data::Image& im = win->image;
    w.put(kWindow).put(win->index).put(win->label).put(im.height).put(im.width).put(im.channels).put_vector(im.pixels);
    put_sizes(w, {win->original, win->resized});
    w.put_vector(win->pixels);
  } else if (const auto* b = std::get_if<InputBatch>(&item)) {
    w.put(kBatch).put_vector(b->indices).put_vector(b->labels).put_vector(b->pixels);
    put_sizes(w, b->original);
    put_sizes(w, b->resized);
    w.put(b->height).put(b->width);
  } else if (const auto* g = std::get_if<Gap>(&item)) {
    w.put(kGap).put(g->index);
  } else {
    w.put(kEnd);
  }
  return w.take();
}

Item decode(const std::vector<uint8_t>& bytes) {
  dist::ByteReader r(bytes);
  switch (r.get<uint8_t>()) {
    case kRaw: {
      RawSample s;
      s.index = r.get<uint64_t>();
      s.label = r.get<int32_t>();
      s.source = r.get_string();
      s.bytes = r.get_vector<uint8_t>();
      s.height = r.get<int64_t>();
      s.width = r.get<int64_t>();
      return s;
    }
    case kWindow: {
      Window w;
      w.index = r.get<uint64_t>();
      w.label = r.get<int32_t>();
      w.image.height = r.get<int>();
      w.image.width = r.get<int>();
      w.image.channels = r.get<int>();
      w.image.pixels = r.get_vector<uint8_t>();
      const std::vector<detect::Size2> sizes = get_sizes(r);
      CHECK(sizes.size() == 2, "pipeline: a window without its sizes");
      w.original = sizes[0], w.resized = sizes[1];
      w.pixels = r.get_vector<float>();
      return w;
    }
    case kBatch: {
      InputBatch b;
      b.indices = r.get_vector<uint64_t>();
      b.labels = r.get_vector<int32_t>();
      b.pixels = r.get_vector<float>();
      b.original = get_sizes(r);
      b.resized = get_sizes(r);
      b.height = r.get<int64_t>();
      b.width = r.get<int64_t>();
      return b;
    }
    case kGap:
      return Gap{r.get<uint64_t>()};
    case kEnd:
      return End{};
  }
  FAIL("pipeline: unknown item kind in a data message");
}

struct StageCount {  // what a rank sends rank 0 in its kDone message, per stage it runs
  int stage;
  double busy_s, cpu_s, wall_s;
  uint64_t items;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of this process, every thread (a predicting rank's OpenMP threads included).
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One rank's share of the pipeline. With `messenger` null it runs every stage alone.
class RankLoop {
 public:
  RankLoop(const EvalSetup& setup, const EvalTask& task, const Layout& layout, int rank, Predictor* predictor,
           dist::Messenger* messenger, const PipelineOptions& o)
      : setup_(setup), task_(task), layout_(layout), rank_(rank), group_(layout.group(rank)), lo_(group_.lo),
        hi_(group_.hi), block_(uint64_t(setup.batch_size)), predictor_(predictor), msg_(messenger), o_(o) {
    CHECK(lo_ != kRead || task_.has_data(), "pipeline: the reading rank has no dataset");
    CHECK(hi_ != kPredict || predictor_ != nullptr, "pipeline: a predicting rank has no model");
    const int g = layout.group_index(rank);
    if (hi_ < kPredict) {
      to_ = layout.groups[size_t(g) + 1];
      for (int r = to_.rank0; r < to_.rank0 + to_.count; ++r)
        credits_[r] = to_.lo == kPredict ? o.batch_credits : o.credits;
    }
    senders_ = g > 0 ? layout.groups[size_t(g) - 1].count : 0;
    next_ = uint64_t(rank - group_.rank0) * block_;  // this rank reads blocks member, member + count, ...
    if (rank_ == 0) read_at_.resize(setup.count, 0.0);
  }

  RunOutput run() {
    const double t0 = now_s();
    const bool root = rank_ == 0;
    for (;;) {
      dist::Message m;
      while (msg_ && msg_->poll(m)) handle(m);
      send_outbox();
      if (ended_ && outbox_.empty() && (!root || dones_ == layout_.ranks - 1)) break;
      if (outbox_.size() < kOutboxCap && has_input()) {
        step();
        continue;
      }
      CHECK(msg_, "pipeline: nothing to do and nobody to wait for (internal error)");
      handle(msg_->wait());
    }
    const double wall = now_s() - t0;
    std::vector<StageCount> mine;
    for (int s = lo_; s <= hi_; ++s) mine.push_back({s, busy_[s], cpu_[s], wall, items_[s]});
    RunOutput out;
    if (root) {
      for (const StageCount& c : mine) out.stages.push_back({stage_name(c.stage), 0, c.busy_s, c.cpu_s, c.wall_s, c.items});
      for (StageTime& t : others_) out.stages.push_back(std::move(t));
      std::sort(out.stages.begin(), out.stages.end(), [](const StageTime& a, const StageTime& b) { return a.rank < b.rank; });
      out.wall_s = last_result_ - t0;
      out.results = std::move(results_);
      out.results.sort();
      out.latency_s = std::move(latency_);
      out.skipped = std::move(skipped_);
      std::sort(out.skipped.begin(), out.skipped.end(), [](auto& a, auto& b) { return a.index < b.index; });
    } else {
      dist::ByteWriter w;
      w.put_vector(mine);
      msg_->send(0, kDone, w.take());
      for (const StageCount& c : mine) out.stages.push_back({stage_name(c.stage), rank_, c.busy_s, c.cpu_s, c.wall_s, c.items});
    }
    return out;
  }

 private:
  static constexpr size_t kOutboxCap = 1;

  bool has_input() const { return !inbox_.empty() || (lo_ == kRead && !source_done_); }

  // One item from the source or the inbox, through this rank's stages.
  void step() {
    fault::point("eval-stage");
    if (lo_ == kRead && !source_done_) {
      if (next_ >= setup_.count) {
        source_done_ = true;
        push(End{}, kDecode);
        return;
      }
      const uint64_t i = next_++;
      if (next_ % block_ == 0) next_ += uint64_t(group_.count - 1) * block_;  // the other readers' blocks
      if (rank_ == 0) read_at_[i] = now_s();
      std::optional<RawSample> s;
      timed(kRead, [&] {
        s = skippable(i, [&] { return task_.read(i); });
      });
      push(s ? Item(std::move(*s)) : Item(Gap{i}), kDecode);
      return;
    }
    Item x = std::move(inbox_.front().second);
    const int from = inbox_.front().first;
    inbox_.pop_front();
    if (std::holds_alternative<End>(x)) {
      if (++ends_ < senders_) return;  // the stream ends when every sender's has
    } else {
      msg_->send(from, kCredit, dist::ByteWriter().put(int32_t(1)).take());
    }
    push(std::move(x), lo_);
  }

  // x is the input of stage s (s > hi_: it leaves this rank).
  void push(Item x, int s) {
    if (s > hi_) {
      if (std::holds_alternative<End>(x)) ended_ = true;
      outbox_.push_back(std::move(x));
      return;
    }
    if (std::holds_alternative<End>(x)) {
      CHECK(s != kNormalize || blocks_.empty(), "pipeline: the stream ended inside block ", blocks_.begin()->first,
            " (internal error)");
      if (s == kPredict) {
        ended_ = true;
        return;
      }
      push(End{}, s + 1);
      return;
    }
    if (std::holds_alternative<Gap>(x) && s == kDecode) {
      push(std::move(x), kNormalize);
      return;
    }
    switch (s) {
      case kDecode: {
        const RawSample& raw = std::get<RawSample>(x);
        std::optional<Window> win;
        timed(kDecode, [&] { win = skippable(raw.index, [&] { return task_.decode(raw); }); });
        push(win ? Item(std::move(*win)) : Item(Gap{raw.index}), kNormalize);
        return;
      }
      case kNormalize:
        add_to_block(std::move(x));
        return;
      case kPredict: {
        fault::point("eval-predict");
        Results r;
        timed(kPredict, [&] { r = predictor_->predict(std::get<InputBatch>(x)); });
        if (rank_ == 0)
          record(std::move(r));
        else
          msg_->send(0, kResults, encode_results(r));
        return;
      }
    }
  }

  // Sample x (a window or a gap) into its block's batch; the block, once complete, to predict.
  // A block's samples come in order: one reader read them, one rank of each stage passed them on.
  void add_to_block(Item x) {
    const uint64_t i = *sample_of(x), b = i / block_;
    Block& blk = blocks_[b];
    CHECK(i == b * block_ + blk.seen, "pipeline: sample ", i, " out of order in block ", b, " (internal error)");
    if (auto* w = std::get_if<Window>(&x)) timed(kNormalize, [&] { task_.add(blk.batch, std::move(*w)); });
    if (++blk.seen < std::min(block_, setup_.count - b * block_)) return;
    Block done = std::move(blk);
    blocks_.erase(b);
    if (done.batch.size() == 0) return;  // every sample of the block skipped
    timed(kNormalize, [&] { task_.seal(done.batch); }, false);
    push(std::move(done.batch), kPredict);
  }

  // fn(), or with --skip-bad nullopt for a sample that fails (reported to rank 0).
  template <class Fn>
  auto skippable(uint64_t i, Fn&& fn) -> std::optional<decltype(fn())> {
    try {
      return fn();
    } catch (const Error& e) {
      if (!o_.skip_bad) throw;
      if (rank_ == 0)
        skipped_.push_back({i, e.message()});
      else
        msg_->send(0, kSkip, dist::ByteWriter().put(i).put(e.message()).take());
      return std::nullopt;
    }
  }

  // fn(), its time counted as the stage's busy time (and, with `count`, one item of it).
  template <class Fn>
  void timed(int stage, Fn&& fn, bool count = true) {
    const double t = now_s(), c = cpu_s();
    fn();
    busy_[stage] += now_s() - t;
    cpu_[stage] += cpu_s() - c;
    items_[stage] += count;
  }

  void record(Results r) {
    const double t = now_s();
    for (const uint64_t i : r.indices()) {
      CHECK(i < setup_.count, "pipeline: a result for sample ", i, " of ", setup_.count);
      if (read_at_[i] > 0) latency_.push_back(t - read_at_[i]);  // rank 0 read it
    }
    results_.append(std::move(r));
    last_result_ = t;
  }

  void handle(const dist::Message& m) {
    switch (m.tag) {
      case kData:
        inbox_.emplace_back(m.source, decode(m.bytes));
        return;
      case kCredit:
        credits_[m.source] += dist::ByteReader(m.bytes).get<int32_t>();
        return;
      case kResults:
        record(decode_results(m.bytes));
        return;
      case kSkip: {
        dist::ByteReader r(m.bytes);
        const uint64_t i = r.get<uint64_t>();
        skipped_.push_back({i, r.get_string()});
        return;
      }
      case kDone:
        for (const StageCount& c : dist::ByteReader(m.bytes).get_vector<StageCount>())
          others_.push_back({stage_name(c.stage), m.source, c.busy_s, c.cpu_s, c.wall_s, c.items});
        ++dones_;
        return;
    }
    FAIL("pipeline: unexpected message tag ", m.tag, " from rank ", m.source);
  }

  // Sends queued items while the receiver has room; the end marker goes to every receiver. A
  // sample goes to the rank of the next group its block belongs to, a batch to any.
  void send_outbox() {
    while (!outbox_.empty()) {
      Item& x = outbox_.front();
      if (std::holds_alternative<End>(x)) {
        for (auto& [r, c] : credits_) msg_->send(r, kData, encode(x));
      } else if (const std::optional<uint64_t> i = sample_of(x)) {
        const int to = to_.rank0 + int(*i / block_ % uint64_t(to_.count));
        if (credits_[to] == 0) return;
        --credits_[to];
        msg_->send(to, kData, encode(x));
      } else {
        auto best = credits_.end();  // the receiver with the most room (the least busy predictor)
        for (auto it = credits_.begin(); it != credits_.end(); ++it)
          if (it->second > 0 && (best == credits_.end() || it->second > best->second)) best = it;
        if (best == credits_.end()) return;
        --best->second;
        msg_->send(best->first, kData, encode(x));
      }
      outbox_.pop_front();
    }
  }

  const EvalSetup& setup_;
  const EvalTask& task_;
  const Layout& layout_;
  const int rank_;
  const StageGroup group_;  // this rank's stages [lo_, hi_] and the ranks that share them
  const int lo_, hi_;
  const uint64_t block_;    // samples per block: the batch size
  StageGroup to_;           // the next group (none after predict)
  int senders_ = 0, ends_ = 0;  // ranks of the previous group; end markers received from them
  Predictor* predictor_;
  dist::Messenger* msg_;
  const PipelineOptions o_;

  std::map<int, int> credits_;  // receiving rank -> items it still has room for
  std::deque<std::pair<int, Item>> inbox_;  // (sender, item)
  std::deque<Item> outbox_;
  // A block being batched: its batch so far and how many of its samples (gaps too) arrived.
  struct Block {
    InputBatch batch;
    uint64_t seen = 0;
  };
  std::map<uint64_t, Block> blocks_;
  uint64_t next_ = 0;  // the next sample this rank reads
  bool source_done_ = false, ended_ = false;
  double busy_[4] = {0, 0, 0, 0}, cpu_[4] = {0, 0, 0, 0};
  uint64_t items_[4] = {0, 0, 0, 0};
  // rank 0: the collector
  double last_result_ = 0;
  std::vector<double> read_at_;  // per sample: when its read started
  Results results_;
  std::vector<double> latency_;
  std::vector<Skipped> skipped_;
  std::vector<StageTime> others_;
  int dones_ = 0;
};


}  // namespace

RunOutput run_pipeline(const EvalSetup& setup, const EvalTask& task, Predictor* predictor,
                       const dist::Comm& comm, const PipelineOptions& options) {
  const Layout layout = options.layout ? *options.layout : layout_for(comm.size());
  CHECK(layout.ranks == comm.size(), "--stages ", layout.spec(), ": uses ", layout.ranks, " ranks, the job has ",
        comm.size());
  const int r = comm.rank();
  dist::Messenger messenger(comm);
  RunOutput out;
  std::string error;
  try {
    out = RankLoop(setup, task, layout, r, predictor, &messenger, options).run();
  } catch (const dist::RemoteError&) {
    // Another rank failed and told everyone; its message comes back from finish().
  } catch (const std::exception& e) {
    const auto* me = dynamic_cast<const Error*>(&e);
    std::string stages = stage_name(layout.first(r));
    if (layout.last(r) != layout.first(r)) stages += ".." + std::string(stage_name(layout.last(r)));
    error = "rank " + std::to_string(r) + " (" + stages + "): " + (me ? me->message() : e.what());
    messenger.send_error(error);
  }
  const std::string remote = messenger.finish();
  comm.on_all([&] {
    if (!error.empty()) MPICNN_FAIL(error);
    if (!remote.empty()) MPICNN_FAIL(remote);
  });
  return out;
}

RunOutput run_sequential(const EvalSetup& setup, const EvalTask& task, Predictor& predictor,
                         const PipelineOptions& options) {
  const Layout solo = layout_for(1);
  return RankLoop(setup, task, solo, 0, &predictor, nullptr, options).run();
}

}  // namespace mpicnn::eval
