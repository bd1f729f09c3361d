// Unit tests of the image preprocessing (node --test), by hand-computed values.
import assert from "node:assert/strict";
import { test } from "node:test";
import { bilinear, boxDown, digitsInput } from "../preprocess.js";

test("boxDown averages whole and fractional pixels by area", () => {
  const img = Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
  assert.deepEqual(Array.from(boxDown(img, 4, 4, 2, 2)), [2.5, 4.5, 10.5, 12.5]);
  // 3 → 2 columns: the middle pixel is split half and half.
  const row = Float32Array.from([0, 3, 6]);
  assert.deepEqual(Array.from(boxDown(row, 1, 3, 1, 2)), [(0 + 1.5) / 1.5, (1.5 + 6) / 1.5]);
});

test("bilinear uses half-pixel centres and clamps at the edges", () => {
  const img = Float32Array.from([0, 4]); // 1 × 2 → 1 × 4
  // positions (k + .5)·2/4 − .5 = −.25, .25, .75, 1.25 → clamped 0, .25, .75, 1
  assert.deepEqual(Array.from(bilinear(img, 1, 2, 1, 4)), [0, 1, 3, 4]);
});

test("digitsInput inverts dark-on-light pictures and normalises", () => {
  const h = 16, w = 16;
  const rgba = new Uint8ClampedArray(h * w * 4).fill(255); // white paper
  for (let y = 4; y < 12; y++) for (let x = 6; x < 8; x++) rgba.fill(0, 4 * (y * w + x), 4 * (y * w + x) + 3); // black stroke
  const prep = { mean: 0.25, std: 0.5, native: 8, size: 32 };
  const { input, native } = digitsInput(rgba, h, w, prep);
  assert.equal(input.length, 32 * 32);
  assert.equal(native[0], 0); // paper became background (0)
  assert.equal(native[2 * 8 + 3], 1); // the stroke became bright ink
  assert.ok(Math.abs(input[0] - (0 - 0.25) / 0.5) < 1e-6);
});
