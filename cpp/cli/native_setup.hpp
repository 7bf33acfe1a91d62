// Process-level tuning for the native front ends (CLI, benchmark); the core stays free of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace biaslab {

// The analyses allocate and free many tangent batches of a few MiB. glibc hands blocks that
// large back to the kernel on every free (mmap/munmap), so each batch page-faults anew; keeping
// them in the heap removes that cost (measured: about a fifth of the default preset's time).
//
// A fresh process still faults in every heap page it touches for the first time, 4 KiB at a
// time: about 1,500 faults for the default preset, which made the first analysis of a process
// take 2.7 times as long as the next one on a virtual machine, where a fault is dear. The heap
// is therefore grown once by kHeapReserve (address space only: nothing is resident until
// touched), and that range is offered to the kernel for transparent huge pages, so that it
// faults 2 MiB at a time. Where the kernel has no huge page to give, or THP is off, it falls
// back to 4 KiB pages; nothing else changes.
inline void tune_native_allocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::size_t kHeapReserve = std::size_t(256) << 20;
  constexpr std::uintptr_t kHuge = std::uintptr_t(2) << 20;
  mallopt(M_TOP_PAD, static_cast<int>(kHeapReserve));
  const auto before = reinterpret_cast<std::uintptr_t>(sbrk(0));
  // A block larger than what is left at the top makes malloc extend the heap by it plus the
  // pad; freed, it goes back to the top of the heap, which the trim threshold keeps. (Through a
  // volatile pointer: a compiler may drop a malloc that is freed unused.)
  void* volatile block = std::malloc(kHeapReserve / 2);
  std::free(block);
  const auto after = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::uintptr_t begin = (before + kHuge - 1) & ~(kHuge - 1), end = after & ~(kHuge - 1);
  if (after != std::uintptr_t(-1) && end > begin)
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
#endif
}

}  // namespace biaslab
