// Internals of the recorder shared by profile.cc (recording) and recorder.cc
// (sessions, draining).  Not for use outside src/profile.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "profile/profile.h"

namespace dsv4::profile::internal {

// One recording thread's ring: a single-producer (the owning thread),
// single-consumer (whoever drains, under the recorder's lock) queue of fixed
// capacity.  The producer writes a slot, then publishes it by a release store
// of head; the consumer reads slots below an acquired head, then frees them
// by a release store of tail.  Full -> the event is dropped and counted.
struct ThreadBuffer {
  ThreadBuffer(int tid_in, int64_t capacity)
      : tid(tid_in), mask(static_cast<uint64_t>(capacity) - 1), ring(new Event[capacity]) {}

  const int tid;  // the trace's thread id: registration order, from 1
  const uint64_t mask;
  std::unique_ptr<Event[]> ring;
  std::atomic<uint64_t> head{0};
  std::atomic<uint64_t> tail{0};
  std::atomic<int64_t> dropped{0};
  std::atomic<const char*> name{nullptr};
  std::atomic<bool> retired{false};  // the thread has exited
};

// The calling thread's buffer, registered on first use.
ThreadBuffer* CurrentBuffer();
// Names the calling thread (kept until its buffer exists).
void NameThread(const char* name);

inline void Push(ThreadBuffer* b, const Event& e) {
  const uint64_t head = b->head.load(std::memory_order_relaxed);
  const uint64_t tail = b->tail.load(std::memory_order_acquire);
  if (head - tail > b->mask) {
    b->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  b->ring[head & b->mask] = e;
  b->head.store(head + 1, std::memory_order_release);
}

}  // namespace dsv4::profile::internal
