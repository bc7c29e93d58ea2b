// Messenger: tagged point-to-point byte messages between the ranks of a pipeline (the stages of
// ./pipeline_eval), with non-blocking sends whose buffers it keeps until delivered, waits that
// nap instead of spinning (idle stages leave the cores to busy ones when ranks outnumber cores),
// an error message any rank can send to all others, and a collective finish that receives every
// message still in flight, so the job always ends cleanly. Not flow control: the stages count
// their own credits. Not thread-safe: the thread that made the Comm calls it.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/comm.h"

namespace mpicnn::dist {

struct Message {
  int source = -1, tag = -1;
  std::vector<uint8_t> bytes;
};

// Raised by poll()/wait() when another rank sent an error: that rank's one-line message.
class RemoteError : public Error {
 public:
  explicit RemoteError(const std::string& message) : Error(message, nullptr, __FILE__, __LINE__) {}
};

class Messenger {
 public:
  static constexpr int kErrorTag = 32000;  // reserved; the stages use tags below it

  // Collective (every rank constructs its Messenger at the same point): the messages travel on
  // a communicator of their own (MPI_Comm_dup), so the messages of one Messenger can never be
  // taken by another, e.g. the next Messenger of a rank that left finish() earlier.
  explicit Messenger(const Comm& comm);
  ~Messenger();  // frees what is left (after an exception); finish() is the clean end
  Messenger(const Messenger&) = delete;
  Messenger& operator=(const Messenger&) = delete;

  // Starts a non-blocking send of `bytes` (moved in, kept until delivered).
  void send(int dest, int tag, std::vector<uint8_t> bytes);
  // A message that has arrived, if any (non-blocking). Throws RemoteError for an error message.
  bool poll(Message& m);
  // Blocks until a message arrives: polls, then naps in steps growing to `max_nap_us`.
  Message wait();
  // Sends `message` to every other rank with kErrorTag (their poll/wait throws RemoteError).
  void send_error(const std::string& message);

  // Collective end: every rank calls it once, after its last send (also after an error). Learns
  // how many messages every rank sent it, receives those it has not yet received (discarding
  // them), and waits for its own sends. Returns the first error message received from another
  // rank at any time (empty if none), so the caller can agree on the outcome.
  std::string finish();

  int max_nap_us = 200;

 private:
  bool receive_one(Message& m, bool discard);  // non-blocking; counts; no throwing
  void complete_sends();
  void nap(int& spins);

  const Comm& comm_;
  MPI_Comm mc_ = MPI_COMM_NULL;  // this Messenger's own duplicate of comm_.world()
  std::deque<std::pair<MPI_Request, std::vector<uint8_t>>> pending_;
  std::vector<int64_t> sent_to_;
  int64_t received_ = 0;
  std::string first_error_;
};

// A barrier whose waiting ranks sleep in 1 ms naps instead of spinning in MPI (so that the
// ranks still working get the cores). Collective.
void napping_barrier(const Comm& comm);

// Flat byte encoding of message payloads (same architecture on every rank: native layout).
class ByteWriter {
 public:
  template <class T>
  ByteWriter& put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof v);
    return *this;
  }
  ByteWriter& put(const std::string& s) {
    put(uint64_t(s.size()));
    append(s.data(), s.size());
    return *this;
  }
  template <class T>
  ByteWriter& put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put(uint64_t(v.size()));
    append(v.data(), v.size() * sizeof(T));
    return *this;
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  void append(const void* p, size_t n) {
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n) std::memcpy(bytes_.data() + at, p, n);
  }
  std::vector<uint8_t> bytes_;
};

// Reads what ByteWriter wrote; a short message is an Error (a bug, not user input).
class ByteReader {
 public:
  explicit ByteReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    copy(&v, sizeof v);
    return v;
  }
  std::string get_string() {
    std::string s(size_t(get<uint64_t>()), '\0');
    copy(s.data(), s.size());
    return s;
  }
  template <class T>
  std::vector<T> get_vector() {
    std::vector<T> v(size_t(get<uint64_t>()));
    copy(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  void copy(void* p, size_t n) {
    CHECK(at_ + n <= bytes_.size(), "message too short: ", n, " bytes at ", at_, " of ", bytes_.size());
    if (n) std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

}  // namespace mpicnn::dist
