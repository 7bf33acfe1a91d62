// File input for the CLI commands ("-" is standard input).
#pragma once

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace biaslab_cli {

// Reads a whole file, or standard input for "-"; false when the file cannot be opened.
inline bool read_all(const std::string& path, std::string& out) {
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    ss << f.rdbuf();
  }
  out = ss.str();
  return true;
}

}  // namespace biaslab_cli
