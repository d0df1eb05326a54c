// A non-owning reference to a callable, for passing "the driver call this
// hook would make" down to the code that decides whether to make it,
// without a template in every layer and without allocating. The callable
// must outlive the reference (a lambda in the caller's frame does).
#ifndef PINSHIM_SHIM_CORE_FUNCTION_REF_H_
#define PINSHIM_SHIM_CORE_FUNCTION_REF_H_

#include <type_traits>
#include <utility>

namespace pinshim {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same<std::decay_t<F>, FunctionRef>::value>>
  FunctionRef(F&& f)  // NOLINT: implicit, like a function pointer
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* obj, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_FUNCTION_REF_H_
