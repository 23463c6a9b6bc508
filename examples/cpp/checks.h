// What the examples share: a check that prints ok/FAIL and counts failures, and `must`, which
// ends the example with zerohop's own message when a call fails.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "zerohop.h"

namespace zh_example {

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

inline void must(zh_status status, const char* call) {
  if (status != ZH_OK) {
    std::fprintf(stderr, "%s failed (%d): %s\n", call, static_cast<int>(status), zh_last_error());
    std::exit(2);
  }
}

}  // namespace zh_example
