// SIGINT and SIGTERM as a request to stop between meta-steps: while a
// StopSignals lives, the first of them is only noted, so that a training
// loop can finish its step, save its checkpoint and end with a clear message
// (a Ctrl-C, a cluster's preemption, `kill`); the default actions come back
// at once, so a second signal ends the process as it would have without us.
//
//   const StopSignals stop;
//   meta_train(maml, sampler, gen, loop, {},
//              {.after_step = [&](const LoopPosition&) { return !stop.requested(); }});
#pragma once

#include <atomic>
#include <csignal>

#include "platipus/core/error.hpp"

namespace platipus {

class StopSignals {
 public:
  StopSignals() {
    received_ = 0;
    struct sigaction action {};
    action.sa_handler = &note;
    sigemptyset(&action.sa_mask);
    check(::sigaction(SIGINT, &action, &previous_interrupt_) == 0 &&
              ::sigaction(SIGTERM, &action, &previous_terminate_) == 0,
          "StopSignals", "cannot install the handlers of SIGINT and SIGTERM");
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &previous_interrupt_, nullptr);
    ::sigaction(SIGTERM, &previous_terminate_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const { return received_ != 0; }
  // The signal that asked to stop (SIGINT or SIGTERM); 0 before one came.
  int signal() const { return received_; }

 private:
  // Async-signal-safe: a lock-free store and sigaction.
  static void note(int signal) {
    received_ = signal;
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    ::sigaction(SIGINT, &fallback, nullptr);
    ::sigaction(SIGTERM, &fallback, nullptr);
  }
  static_assert(std::atomic<int>::is_always_lock_free);
  static inline std::atomic<int> received_{0};
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
};

}  // namespace platipus
