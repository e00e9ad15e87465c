// RFC 8785 (JSON Canonicalization Scheme) written the way the RFC itself
// describes it, in ECMAScript: numbers and strings take JSON.stringify's
// forms (RFC 8785 sections 3.2.2.2 and 3.2.2.3), and object members are
// sorted by their names' UTF-16 code units, which is what Array.prototype.sort
// does to strings by default (section 3.2.3).
//
// It reads JSON texts from stdin, one per line, and writes one line for
// each: the canonical text, or "ERROR" and why JSON.parse refused it, or
// why the value is not I-JSON (a number that is not finite).
'use strict';

function canonicalize(v) {
  if (v === null || typeof v === 'boolean') {
    return JSON.stringify(v);
  }
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) {
      throw new RangeError('not a finite number');
    }
    return JSON.stringify(v);
  }
  if (typeof v === 'string') {
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) {
    return '[' + v.map(canonicalize).join(',') + ']';
  }
  const names = Object.keys(v).sort();
  return '{' + names.map((k) => JSON.stringify(k) + ':' + canonicalize(v[k])).join(',') + '}';
}

const lines = require('fs').readFileSync(0, 'utf8').split('\n');
if (lines[lines.length - 1] === '') {
  lines.pop();
}
const out = lines.map((line) => {
  try {
    return canonicalize(JSON.parse(line));
  } catch (e) {
    return 'ERROR ' + e.name + ': ' + String(e.message).slice(0, 100);
  }
});
process.stdout.write(out.map((l) => l + '\n').join(''));
