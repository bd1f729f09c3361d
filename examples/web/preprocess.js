// @ts-check
/**
 * A user's picture → the digits model's input, the way the Python task prepares its images:
 * area-average to the native 8×8, ink bright on dark (sklearn's digits), bilinear upsampling
 * with half-pixel centres to 32×32, then the train split's mean/std.
 * @module preprocess
 */

/**
 * Area average of a (h, w) grey image down to (oh, ow).
 * @param {Float32Array} grey values in [0, 1], row-major
 * @param {number} h
 * @param {number} w
 * @param {number} oh
 * @param {number} ow
 * @returns {Float32Array}
 */
export function boxDown(grey, h, w, oh, ow) {
  const out = new Float32Array(oh * ow);
  for (let i = 0; i < oh; i++) {
    const y0 = (i * h) / oh, y1 = ((i + 1) * h) / oh;
    for (let j = 0; j < ow; j++) {
      const x0 = (j * w) / ow, x1 = ((j + 1) * w) / ow;
      let sum = 0, area = 0;
      for (let y = Math.floor(y0); y < Math.ceil(y1); y++) {
        const wy = Math.min(y + 1, y1) - Math.max(y, y0);
        for (let x = Math.floor(x0); x < Math.ceil(x1); x++) {
          const wx = Math.min(x + 1, x1) - Math.max(x, x0);
          sum += grey[y * w + x] * wy * wx;
          area += wy * wx;
        }
      }
      out[i * ow + j] = sum / area;
    }
  }
  return out;
}

/**
 * Bilinear resize with half-pixel centres (torch's align_corners=False, clamped at the edges).
 * @param {Float32Array} img (h, w) row-major
 * @param {number} h
 * @param {number} w
 * @param {number} oh
 * @param {number} ow
 * @returns {Float32Array}
 */
export function bilinear(img, h, w, oh, ow) {
  /** @param {number} nIn @param {number} nOut */
  const axis = (nIn, nOut) =>
    Array.from({ length: nOut }, (_, k) => {
      const pos = Math.min(Math.max(((k + 0.5) * nIn) / nOut - 0.5, 0), nIn - 1);
      const lo = Math.floor(pos);
      return { lo, hi: Math.min(lo + 1, nIn - 1), f: pos - lo };
    });
  const ys = axis(h, oh), xs = axis(w, ow);
  const out = new Float32Array(oh * ow);
  for (let i = 0; i < oh; i++) {
    const { lo: y0, hi: y1, f: fy } = ys[i];
    for (let j = 0; j < ow; j++) {
      const { lo: x0, hi: x1, f: fx } = xs[j];
      const top0 = img[y0 * w + x0] * (1 - fy) + img[y1 * w + x0] * fy;
      const top1 = img[y0 * w + x1] * (1 - fy) + img[y1 * w + x1] * fy;
      out[i * ow + j] = top0 * (1 - fx) + top1 * fx;
    }
  }
  return out;
}

/**
 * RGBA pixels (as from a canvas) → the normalised (1, 32, 32) digits input.
 * @param {Uint8ClampedArray} rgba
 * @param {number} h
 * @param {number} w
 * @param {{mean: number, std: number, native: number, size: number}} prep the task's numbers
 * @returns {{input: Float32Array, native: Float32Array}}
 */
export function digitsInput(rgba, h, w, prep) {
  const grey = new Float32Array(h * w);
  for (let k = 0; k < h * w; k++) {
    grey[k] = (0.299 * rgba[4 * k] + 0.587 * rgba[4 * k + 1] + 0.114 * rgba[4 * k + 2]) / 255;
  }
  let native = boxDown(grey, h, w, prep.native, prep.native);
  const mean = native.reduce((a, b) => a + b, 0) / native.length;
  if (mean > 0.5) native = native.map((v) => 1 - v); // dark ink on paper → bright ink on dark
  const big = bilinear(native, prep.native, prep.native, prep.size, prep.size);
  return { input: big.map((v) => (v - prep.mean) / prep.std), native };
}
