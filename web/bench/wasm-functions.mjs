// Where a wasm module's bytes go: code size per function, grouped by a name pattern. Needs a
// build with a name section (link with --profiling-funcs); the page's build has none.
//
//   node bench/wasm-functions.mjs build.wasm [top N]
import { readFileSync } from 'node:fs';

function leb(bytes, pos) {
  let result = 0;
  let shift = 0;
  for (;;) {
    const b = bytes[pos++];
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (!(b & 0x80)) return [result, pos];
  }
}

export function function_sizes(bytes) {
  let pos = 8;
  let imported_functions = 0;
  const bodies = [];
  const names = new Map();
  const sections = [];
  while (pos < bytes.length) {
    const id = bytes[pos++];
    let size;
    [size, pos] = leb(bytes, pos);
    const end = pos + size;
    sections.push({ id, size });
    if (id === 2) {
      // imports: count functions so body indices line up with the name section
      let n, p = pos;
      [n, p] = leb(bytes, p);
      for (let i = 0; i < n; i++) {
        let len;
        [len, p] = leb(bytes, p); p += len; // module
        [len, p] = leb(bytes, p); p += len; // field
        const kind = bytes[p++];
        if (kind === 0) { [, p] = leb(bytes, p); imported_functions++; }
        else if (kind === 1) { p++; const flags = bytes[p++]; [, p] = leb(bytes, p); if (flags & 1) [, p] = leb(bytes, p); }
        else if (kind === 2) { const flags = bytes[p++]; [, p] = leb(bytes, p); if (flags & 1) [, p] = leb(bytes, p); }
        else if (kind === 3) { p += 2; }
        else if (kind === 4) { p++; [, p] = leb(bytes, p); } // tag
      }
    } else if (id === 10) {
      let n, p = pos;
      [n, p] = leb(bytes, p);
      for (let i = 0; i < n; i++) {
        let len;
        [len, p] = leb(bytes, p);
        bodies.push(len);
        p += len;
      }
    } else if (id === 0) {
      let len, p = pos;
      [len, p] = leb(bytes, p);
      const name = new TextDecoder().decode(bytes.subarray(p, p + len));
      p += len;
      if (name === 'name') {
        while (p < end) {
          const sub = bytes[p++];
          let sub_size;
          [sub_size, p] = leb(bytes, p);
          const sub_end = p + sub_size;
          if (sub === 1) {
            let n, q = p;
            [n, q] = leb(bytes, q);
            for (let i = 0; i < n; i++) {
              let index, l;
              [index, q] = leb(bytes, q);
              [l, q] = leb(bytes, q);
              names.set(index, new TextDecoder().decode(bytes.subarray(q, q + l)));
              q += l;
            }
          }
          p = sub_end;
        }
      }
    }
    pos = end;
  }
  return {
    sections,
    functions: bodies.map((size, i) => ({ name: names.get(i + imported_functions) ?? `f${i + imported_functions}`, size })),
  };
}

const GROUPS = [
  ['embind / val', /emscripten::|embind|_EmVal|EmVal/],
  ['nlohmann::json', /nlohmann/],
  ['Eigen', /Eigen::/],
  ['std::regex', /regex/],
  ['iostream / locale', /std::__2::(basic_(i|o)stream|basic_ios|locale|ctype|num_put|num_get|__num|time_|money|codecvt|basic_streambuf|basic_stringbuf|ios_base)/],
  ['std::string / containers', /std::__2::(basic_string|vector|__tree|map|__hash|unordered|deque)/],
  ['biaslab', /biaslab::/],
  ['libc / malloc / printf', /^(dlmalloc|dlfree|malloc|free|printf|vfprintf|fmt_|pop_arg|__|memcpy|memset|strto|sn?printf|emscripten_)/],
];

if (process.argv[2]) {
  const { sections, functions } = function_sizes(readFileSync(process.argv[2]));
  const top = Number(process.argv[3] ?? 30);
  const total = functions.reduce((a, f) => a + f.size, 0);
  console.log('sections:', sections.map((s) => `${s.id}:${s.size}`).join(' '));
  console.log(`${functions.length} functions, ${total} bytes of code`);
  const grouped = new Map();
  for (const f of functions) {
    const g = GROUPS.find(([, re]) => re.test(f.name))?.[0] ?? 'other';
    grouped.set(g, (grouped.get(g) ?? 0) + f.size);
  }
  for (const [g, n] of [...grouped].sort((a, b) => b[1] - a[1])) console.log(`${(n / 1024).toFixed(1).padStart(8)} KB  ${g}`);
  console.log('largest:');
  for (const f of functions.sort((a, b) => b.size - a.size).slice(0, top)) console.log(`${String(f.size).padStart(8)}  ${f.name.slice(0, 160)}`);
}
