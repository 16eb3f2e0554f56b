// A non-owning reference to a callable, for calls that use it only while they
// run (ThreadPool::ParallelFor blocks until every range is done).  Unlike
// std::function it never copies the callable, so a lambda capturing more than
// two pointers costs no heap allocation per call: the forward pass dispatches
// a hundred or more kernels per decode step (docs/kernels.md "Scratch memory").
//
// Bind it to a callable that outlives every use: a function parameter bound
// to a lambda argument is fine (the temporary lives to the end of the call);
// `FunctionRef<...> f = [&] {...};` as a local is not (the lambda dies at the
// end of that statement) — name the lambda `auto` instead.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace dsv4 {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                              std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): binds like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_(&Invoke<std::remove_reference_t<F>>) {}

  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  template <class F>
  static R Invoke(void* obj, Args... args) {
    return (*static_cast<F*>(obj))(std::forward<Args>(args)...);
  }

  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace dsv4
