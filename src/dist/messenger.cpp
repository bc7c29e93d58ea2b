// Messenger: non-blocking tagged sends, napping waits, error broadcast and the counted
// collective finish. See messenger.h for what it is and is not.
#include "dist/messenger.h"

#include <time.h>

#include <algorithm>

#include "dist/watchdog.h"

namespace mpicnn::dist {

Messenger::Messenger(const Comm& comm) : comm_(comm), sent_to_(size_t(comm.size()), 0) {
  WaitGuard wait("MPI_Comm_dup", "pipeline start");  // collective: waits for every rank
  MPI_CHECK(MPI_Comm_dup(comm.world(), &mc_));
  MPI_CHECK(MPI_Comm_set_errhandler(mc_, MPI_ERRORS_RETURN));
}

Messenger::~Messenger() {
  // Requests are left only after an exception escaped before finish(): the job is ending;
  // free what we can. No throwing from a destructor.
  for (auto& [req, buf] : pending_)
    if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mc_ != MPI_COMM_NULL) MPI_Comm_free(&mc_);
}

void Messenger::send(int dest, int tag, std::vector<uint8_t> bytes) {
  CHECK(bytes.size() <= size_t(INT32_MAX), "message of ", bytes.size(), " bytes is too large for MPI");
  pending_.emplace_back(MPI_REQUEST_NULL, std::move(bytes));
  auto& [req, buf] = pending_.back();
  MPI_CHECK(MPI_Isend(buf.data(), int(buf.size()), MPI_BYTE, dest, tag, mc_, &req));
  ++sent_to_[size_t(dest)];
}

void Messenger::complete_sends() {
  // Oldest first; stop at the first still in flight (later ones are usually younger).
  while (!pending_.empty()) {
    int done = 0;
    MPI_CHECK(MPI_Test(&pending_.front().first, &done, MPI_STATUS_IGNORE));
    if (!done) break;
    pending_.pop_front();
  }
}

bool Messenger::receive_one(Message& m, bool discard) {
  int flag = 0;
  MPI_Status st;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, mc_, &flag, &st));
  if (!flag) return false;
  int n = 0;
  MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
  m.source = st.MPI_SOURCE;
  m.tag = st.MPI_TAG;
  m.bytes.resize(size_t(n));
  MPI_CHECK(MPI_Recv(m.bytes.data(), n, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, mc_, MPI_STATUS_IGNORE));
  ++received_;
  if (m.tag == kErrorTag && first_error_.empty()) first_error_.assign(m.bytes.begin(), m.bytes.end());
  if (discard) m.bytes.clear();
  return true;
}

bool Messenger::poll(Message& m) {
  complete_sends();
  if (!receive_one(m, false)) return false;
  if (m.tag == kErrorTag) throw RemoteError(first_error_);
  return true;
}

void Messenger::nap(int& spins) {
  // A few hundred polls first (a message is often a few microseconds away), then sleeps that
  // grow to max_nap_us: a rank waiting for work costs next to no CPU.
  if (++spins < 200) return;
  const long us = std::min<long>(max_nap_us, 5L * (spins - 199));
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

Message Messenger::wait() {
  Message m;
  WaitGuard wait("MPI_Iprobe", "waiting for a pipeline message");
  for (int spins = 0; !poll(m);) nap(spins);
  return m;
}

void Messenger::send_error(const std::string& message) {
  for (int r = 0; r < comm_.size(); ++r)
    if (r != comm_.rank()) send(r, kErrorTag, std::vector<uint8_t>(message.begin(), message.end()));
}

std::string Messenger::finish() {
  const int K = comm_.size();
  std::vector<int64_t> expect(size_t(K), 0);
  WaitGuard wait("MPI_Ialltoall", "pipeline finish");
  MPI_Request req;
  MPI_CHECK(MPI_Ialltoall(sent_to_.data(), 1, MPI_INT64_T, expect.data(), 1, MPI_INT64_T, mc_, &req));
  Message m;
  int spins = 0;
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (receive_one(m, true)) spins = 0; else nap(spins);
    complete_sends();
  }
  int64_t total = 0;
  for (int64_t e : expect) total += e;
  // Every message counted in `total` has been sent, so these receives all complete.
  for (spins = 0; received_ < total;) {
    if (receive_one(m, true)) spins = 0; else nap(spins);
    complete_sends();
  }
  for (spins = 0; !pending_.empty();) {
    complete_sends();
    if (!pending_.empty()) nap(spins);
  }
  return first_error_;
}

void napping_barrier(const Comm& comm) {
  WaitGuard wait("MPI_Ibarrier", nullptr);
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm.world(), &req));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    timespec ts{0, 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace mpicnn::dist
