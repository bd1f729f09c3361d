// @ts-check
/**
 * The plots' axis ticks: round values, labelled with as many decimals as their spacing needs.
 * @module axes
 */

/**
 * The round spacing (1, 2 or 5 × 10^k) that puts about ``count`` intervals over [lo, hi].
 * @param {number} lo
 * @param {number} hi
 * @param {number} [count]
 * @returns {number}
 */
export function niceStep(lo, hi, count = 5) {
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw * (1 - 1e-9)) ?? 10 * power;
}

/**
 * [lo, hi] widened to whole steps of its ticks, so that both ends carry one.
 * @param {number} lo
 * @param {number} hi
 * @param {number} [count]
 * @returns {[number, number, number]} the range and its step (give it to {@link ticks})
 */
export function niceRange(lo, hi, count = 5) {
  const step = niceStep(lo, hi, count);
  return [Math.floor(lo / step + 1e-6) * step, Math.ceil(hi / step - 1e-6) * step, step];
}

/**
 * Evenly spaced round ticks over [lo, hi], each labelled with the decimals its step needs, so
 * that no two ticks read the same.
 * @param {number} lo
 * @param {number} hi
 * @param {number} [count] about this many intervals
 * @param {number} [step] the spacing (default: the round one for ``count``)
 * @returns {{value: number, label: string}[]}
 */
export function ticks(lo, hi, count = 5, step = niceStep(lo, hi, count)) {
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-6); k <= Math.floor(hi / step + 1e-6); k++) {
    const value = k * step;
    out.push({ value, label: (k === 0 ? 0 : value).toFixed(decimals) });
  }
  return out;
}
