// Unit tests of the plots' ticks (node --test): round, inside the range, distinct labels.
import assert from "node:assert/strict";
import { test } from "node:test";
import { niceRange, ticks } from "../axes.js";

const labels = (lo, hi) => ticks(lo, hi).map((t) => t.label);

test("ticks are round steps inside the range", () => {
  assert.deepEqual(labels(0, 100), ["0", "20", "40", "60", "80", "100"]);
  assert.deepEqual(labels(0, 1), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
  for (const t of ticks(0.13, 0.97)) assert.ok(t.value >= 0.13 - 1e-12 && t.value <= 0.97 + 1e-12);
});

test("a narrow range gets the decimals it needs: no two labels alike", () => {
  // λ moving from 0.1 by a few ten-thousandths read 0.1 and 0.1 with three significant digits.
  for (const [lo, hi] of [[0.1, 0.1004], [0.15, 0.15002], [0.0999, 0.1001], [1e-5, 3e-5], [1234.5, 1234.9], [-0.002, 0.003]]) {
    const got = labels(lo, hi);
    assert.ok(got.length >= 2, `${lo}..${hi}: ${got}`);
    assert.equal(new Set(got).size, got.length, `${lo}..${hi}: ${got}`);
  }
  assert.deepEqual(labels(0.1, 0.1004), ["0.1000", "0.1001", "0.1002", "0.1003", "0.1004"]);
});

test("zero reads 0, not -0.000", () => {
  assert.ok(labels(-0.3, 0.3).includes("0.0"));
  assert.ok(!labels(-0.3, 0.3).some((l) => l.startsWith("-0.0") && Number(l) === 0));
});

test("a widened range starts and ends on a tick", () => {
  for (const [lo, hi] of [[0.10000342, 0.10002878], [0.1499992, 0.1499999], [0.0003, 0.0117], [61.3, 83.9], [0.11, 0.19]]) {
    const [a, b, step] = niceRange(lo, hi);
    assert.ok(a <= lo && b >= hi, `${lo}..${hi} → ${a}..${b}`);
    const got = ticks(a, b, 5, step);
    assert.equal(got[0].value.toFixed(12), a.toFixed(12), `${lo}..${hi}: ${got.map((t) => t.label)}`);
    assert.equal(got[got.length - 1].value.toFixed(12), b.toFixed(12), `${lo}..${hi}: ${got.map((t) => t.label)}`);
  }
});
