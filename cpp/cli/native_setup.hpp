// Process-level tuning for the native front ends (CLI, benchmark); the core stays free of it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace biaslab {

// The memory an analysis may use by default (the CLI's --memory-budget), in bytes: the machine's
// physical memory, or less where the process's control group states a limit (cgroup v2's
// memory.max, v1's memory.limit_in_bytes, read at their usual mount point). 0 where unknown.
// (`limits`: the files to read, for the tests.)
inline double machine_memory(std::initializer_list<const char*> limits = {"/sys/fs/cgroup/memory.max",
                                                                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
  double bytes = 0;
#if defined(__linux__)
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && size > 0) bytes = double(pages) * double(size);
  for (const char* path : limits) {
    std::ifstream f(path);
    double limit = 0;
    if (f >> limit && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;  // ("max": no limit)
  }
#endif
  return bytes;
}

// The analyses allocate and free many tangent batches of a few MiB. glibc hands blocks that
// large back to the kernel on every free (mmap/munmap), so each batch page-faults anew; keeping
// them in the heap removes that cost (measured: about a fifth of the default preset's time).
inline void tune_native_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

// Address space reserved at the top of the heap by reserve_huge_page_heap: the 1024-wide presets
// peak at about 350 MB.
constexpr std::size_t kHugePageHeap = std::size_t(384) << 20;

// A fresh process faults in every heap page it touches for the first time, 4 KiB at a time:
// about 1,500 faults for the default preset, one reason the first analysis of a process took
// 2.7 times as long as the next on a virtual machine, where a fault is dear. For the commands
// that analyse, the heap is grown once by kHugePageHeap (address space: nothing is resident
// until touched, but a kernel that never overcommits counts it) and the range is offered to the
// kernel for transparent huge pages, so it faults 2 MiB at a time. Later growth of the heap is
// as before. Where THP is off the advice is refused and pages stay 4 KiB; where no huge page is
// free, the kernel may first compact memory (THP defrag "madvise", Debian's default), then falls
// back. Call after tune_native_allocator (its trim threshold keeps the range in the heap).
inline void reserve_huge_page_heap() {
#if defined(__GLIBC__) && defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t(2) << 20;
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  // A block this large extends the heap by about its size; freed, it becomes the top of the
  // heap. (Through a volatile pointer: a compiler may drop a malloc that is freed unused.)
  void* volatile block = std::malloc(kHugePageHeap);
  if (!block) return;  // no room for the reserve (a limit on address space): nothing to advise
  std::free(block);
  const auto after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::uintptr_t begin = (before + kHuge - 1) & ~(kHuge - 1), end = after & ~(kHuge - 1);
  if (after != std::uintptr_t(-1) && end > begin)
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace biaslab
