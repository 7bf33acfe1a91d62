// A table (table-model.js) as Markdown or CSV text: what the Markdown and CSV buttons download,
// fetched on the first download (the first load does not carry it).

/** GitHub-flavoured Markdown; pipes and line breaks in cells are escaped. */
export function to_markdown(table) {
  const cell = (s) => String(s).replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');
  const head = `| ${table.columns.map((c) => cell(c.label)).join(' | ')} |`;
  const rule = `| ${table.columns.map((c) => (c.numeric ? '---:' : '---')).join(' | ')} |`;
  const rows = table.rows.map((r) => `| ${table.columns.map((c) => cell(c.text(r))).join(' | ')} |`);
  const title = `### ${table.title}\n\n` + (table.caption ? `${table.caption}\n\n` : '');
  return title + [head, rule, ...rows].join('\n') + '\n';
}

/** RFC 4180 CSV: numbers at full precision, fields quoted when they need it. */
export function to_csv(table) {
  const field = (v) => {
    if (v === null || v === undefined) return '';
    const s = typeof v === 'number' ? (Number.isFinite(v) ? String(v) : '') : String(v);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  const lines = [table.columns.map((c) => field(c.label)).join(',')];
  for (const r of table.rows) lines.push(table.columns.map((c) => field((c.value ?? c.text)(r))).join(','));
  return lines.join('\r\n') + '\r\n';
}
