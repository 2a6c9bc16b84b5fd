// Whether differentiable ops record onto their tape. Thread-local (each
// thread has its own mode, as in PyTorch), never shared between threads.
#pragma once

namespace platipus {

class GradMode {
 public:
  static bool enabled() { return flag(); }
  static void set_enabled(bool on) { flag() = on; }

 private:
  static bool& flag() {
    thread_local bool on = true;
    return on;
  }
};

// Sets the grad mode for the guard's lifetime and restores it afterwards.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(GradMode::enabled()) {
    GradMode::set_enabled(enabled);
  }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
  ~GradModeGuard() { GradMode::set_enabled(previous_); }

 private:
  bool previous_;
};

// Ops inside the guard compute values only: nothing is recorded, results are
// constants. Use it for evaluation and for updates of meta-parameters.
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

// While on, losses throw platipus::error when their value is NaN or
// infinite, naming the loss and its input shapes (a debugging aid; off by
// default, like torch.autograd.detect_anomaly).
class NanCheck {
 public:
  static bool enabled() { return flag(); }
  static void set_enabled(bool on) { flag() = on; }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
};

class NanCheckGuard {
 public:
  explicit NanCheckGuard(bool enabled = true) : previous_(NanCheck::enabled()) {
    NanCheck::set_enabled(enabled);
  }
  NanCheckGuard(const NanCheckGuard&) = delete;
  NanCheckGuard& operator=(const NanCheckGuard&) = delete;
  ~NanCheckGuard() { NanCheck::set_enabled(previous_); }

 private:
  bool previous_;
};

}  // namespace platipus
