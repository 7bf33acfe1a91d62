// File input for the CLI commands ("-" is standard input).
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace biaslab_cli {

// Reads a whole file, or standard input for "-"; false when it cannot be read: a file that does
// not open, or a directory (which opens on Linux and reads as nothing, then looked like an empty
// config).
inline bool read_all(const std::string& path, std::string& out) {
  struct stat st {};
  if ((path == "-" ? fstat(0, &st) : stat(path.c_str(), &st)) == 0 && S_ISDIR(st.st_mode)) return false;
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    if (std::cin.bad()) return false;
  } else {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    ss << f.rdbuf();
    if (f.bad()) return false;
  }
  out = ss.str();
  return true;
}

}  // namespace biaslab_cli
