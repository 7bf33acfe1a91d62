// The native front ends' process tuning (cli/native_setup.hpp): the heap range reserved for the
// analysing commands is really there, offered for transparent huge pages, and reserved once.
#include "cli/native_setup.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace {

// The THP mode the kernel offers ("always [madvise] never" -> "madvise"); empty without THP.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "";
  const auto a = line.find('['), b = line.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
}

}  // namespace

TEST_CASE("native setup: the analysing commands' heap reserve is offered for huge pages, once") {
#if defined(__linux__) && defined(__GLIBC__) && defined(MADV_HUGEPAGE)
  biaslab::tune_native_allocator();
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  biaslab::reserve_huge_page_heap();
  const auto after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  // The heap's top chunk (free, at its end) now holds the reserve; earlier tests in this
  // process may have left part of it free already, so the end moved by at most that much.
  const std::size_t top = mallinfo2().keepcost;
  INFO("the heap's end moved by " << (after - before) / 1048576.0 << " MiB; its free top is " << top / 1048576.0 << " MiB");
  CHECK(top >= biaslab::kHugePageHeap);
  CHECK(after > before);
  // Later growth is not padded by the reserve: a block just larger than it extends the heap
  // by about the difference, not by another reserve.
  {
    void* volatile block = std::malloc(biaslab::kHugePageHeap + (std::size_t(16) << 20));
    REQUIRE(block != nullptr);
    const auto grown = reinterpret_cast<std::uintptr_t>(sbrk(0));
    std::free(block);
    INFO("a block 16 MiB over the reserve moved the heap's end by " << (grown - after) / 1048576.0 << " MiB");
    CHECK(grown - after < (std::uintptr_t(64) << 20));
  }
  const std::string mode = thp_mode();
  if (mode.empty() || mode == "never") {
    MESSAGE("transparent huge pages are off here (mode '" << mode << "'): the advice is not checked");
    return;
  }
  // Some mapping of the heap carries the advice: VmFlags "hg" in /proc/self/smaps.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_heap = false, advised = false;
  while (std::getline(smaps, line)) {
    const bool header = !line.empty() && ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f'));
    if (header)  // "start-end perms offset dev inode [name]"; the fields under it start upper-case
      in_heap = line.find("[heap]") != std::string::npos;
    else if (in_heap && line.rfind("VmFlags:", 0) == 0 && (line + " ").find(" hg ") != std::string::npos)
      advised = true;
  }
  CHECK_MESSAGE(advised, "no [heap] mapping with VmFlags hg after reserve_huge_page_heap (THP mode " << mode << ")");
#else
  MESSAGE("not Linux with glibc: nothing to check");
#endif
}

#if defined(__linux__)
TEST_CASE("native setup: the default memory budget is the machine's memory, or less where a control group limits it") {
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string limited = dir + "/biaslab-test-memory.max", unlimited = dir + "/biaslab-test-memory.max-none";
  std::ofstream(limited) << "1000000\n";
  std::ofstream(unlimited) << "max\n";
  INFO("physical " << physical);
  CHECK(biaslab::machine_memory({}) == physical);
  CHECK(biaslab::machine_memory({limited.c_str()}) == 1000000.0);
  CHECK(biaslab::machine_memory({unlimited.c_str()}) == physical);
  CHECK(biaslab::machine_memory({"/nonexistent/memory.max"}) == physical);
  CHECK(biaslab::machine_memory() <= physical);
  std::remove(limited.c_str());
  std::remove(unlimited.c_str());
}
#endif
