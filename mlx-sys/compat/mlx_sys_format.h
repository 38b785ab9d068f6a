/* Force-included into every mlx-c translation unit.
 *
 * mlx-c formats a few error messages with std::format, which GCC 12's libstdc++ lacks.
 * Where <format> is missing, this supplies the one form mlx-c uses: "{}" placeholders
 * filled in order. */
#ifndef MLX_SYS_FORMAT_H
#define MLX_SYS_FORMAT_H

#ifdef __cplusplus
#if __has_include(<format>)
#include <format>
#else
#include <sstream>
#include <string>
#include <string_view>

namespace std {
namespace mlx_sys_detail {
inline void format_rest(ostringstream& out, string_view fmt) {
  out << fmt;
}
template <typename T, typename... Rest>
void format_rest(ostringstream& out, string_view fmt, const T& value, const Rest&... rest) {
  auto at = fmt.find("{}");
  if (at == string_view::npos) {
    out << fmt;
    return;
  }
  out << fmt.substr(0, at) << value;
  format_rest(out, fmt.substr(at + 2), rest...);
}
} // namespace mlx_sys_detail

template <typename... Args>
string format(string_view fmt, const Args&... args) {
  ostringstream out;
  mlx_sys_detail::format_rest(out, fmt, args...);
  return out.str();
}
} // namespace std
#endif
#endif

#endif
