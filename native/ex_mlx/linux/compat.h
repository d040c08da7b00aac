/*
 * Linux adapter (see README.md here): header gaps between mlx-c 0.7.0 and an x86_64
 * Linux toolchain (GCC 12 / clang 14). Force-included into every C++ file of the
 * mlx-c build (CXXFLAGS=-include) and into bindgen's parse of the C headers
 * (BINDGEN_EXTRA_CLANG_ARGS=-include). The Mix compiler sets both.
 */
#ifndef EX_MLX_LINUX_COMPAT_H
#define EX_MLX_LINUX_COMPAT_H

#ifdef __cplusplus

/*
 * Gap 1: mlx-c calls std::format("... {} ...", args) in five error messages
 * (mlx/c/private/io.h), but GCC 12's libstdc++ has no <format>. Where the real
 * one exists we use it; otherwise this minimal version handles exactly that
 * pattern: each "{}" is replaced by the next argument (strings as they are,
 * numbers through std::to_string).
 */
#if __cplusplus >= 202002L /* mlx-c is C++20; CMake's compiler probe is not */
#if __has_include(<format>)
#include <format>
#endif
#if !defined(__cpp_lib_format)
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
namespace ex_mlx_compat {
inline std::string to_text(const std::string& s) { return s; }
inline std::string to_text(const char* s) { return std::string(s); }
inline std::string to_text(std::string_view s) { return std::string(s); }
template <class T>
  requires std::is_arithmetic_v<std::decay_t<T>>
std::string to_text(T v) { return std::to_string(v); }

inline void append_format(std::string& out, std::string_view fmt) { out += fmt; }
template <class First, class... Rest>
void append_format(std::string& out, std::string_view fmt, First&& first, Rest&&... rest) {
  auto at = fmt.find("{}");
  if (at == std::string_view::npos) {
    out += fmt;
    return;
  }
  out += fmt.substr(0, at);
  out += to_text(std::forward<First>(first));
  append_format(out, fmt.substr(at + 2), std::forward<Rest>(rest)...);
}
} // namespace ex_mlx_compat
namespace std {
template <class... Args>
std::string format(std::string_view fmt, Args&&... args) {
  std::string out;
  ex_mlx_compat::append_format(out, fmt, std::forward<Args>(args)...);
  return out;
}
} // namespace std
#endif /* !__cpp_lib_format */
#endif /* C++20 */

/*
 * Gap 2 (C++ side): mlx-c defines mlx_array_item_float16/bfloat16 and
 * mlx_array_data_float16/bfloat16 only when its half.h sees an aarch64
 * compiler, yet mlx-rs calls them on every target. MLX itself has portable
 * half types, so we declare the two typedefs with them and switch the
 * functions on. Guarded: CMake's compiler check compiles without MLX headers.
 */
#if __has_include(<mlx/types/half_types.h>)
#include <mlx/types/half_types.h>
#define HAS_FLOAT16
#define HAS_BFLOAT16
typedef mlx::core::float16_t float16_t;
typedef mlx::core::bfloat16_t bfloat16_t;
#endif

/*
 * Gap 3: MLX 0.32.4 put a `global_scale` parameter into gather_qmm, before
 * `sorted_indices`; mlx-c 0.7.0 calls the 0.32.2 signature, passing
 * `sorted_indices` where 0.32.4 expects `global_scale`. For 0.32.4 and later
 * this overload takes the 0.32.2 arguments and calls MLX's function with no
 * global scale (the value 0.32.2 had). Guarded as gap 2.
 */
#if __cplusplus >= 202002L && __has_include(<mlx/version.h>)
#include <mlx/version.h>
#if MLX_VERSION_NUMERIC >= 32004
#include <mlx/ops.h>
namespace mlx::core {
inline array gather_qmm(
    const array& x,
    const array& w,
    const array& scales,
    const std::optional<array>& biases,
    std::optional<array> lhs_indices,
    std::optional<array> rhs_indices,
    bool transpose,
    std::optional<int> group_size,
    std::optional<int> bits,
    const std::string& mode,
    bool sorted_indices,
    StreamOrDevice s) {
  return gather_qmm(
      x, w, scales, biases, std::move(lhs_indices), std::move(rhs_indices),
      transpose, group_size, bits, mode, std::nullopt, sorted_indices, s);
}
} // namespace mlx::core
#endif
#endif

#else /* C: what bindgen parses */

/*
 * Gap 2 (bindgen side): the same declarations for bindgen, with the C types
 * mlx-rs expects: __fp16 becomes bindgen's __BindgenFloat16 (a u16 newtype)
 * and bfloat16_t a plain u16. Both are 16-bit values passed by pointer, so
 * the ABI matches the C++ definitions above.
 */
#include <stdint.h>
#define HAS_FLOAT16
#define HAS_BFLOAT16
typedef __fp16 float16_t;
typedef uint16_t bfloat16_t;

#endif /* __cplusplus */

#endif /* EX_MLX_LINUX_COMPAT_H */
