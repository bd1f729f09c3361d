// What the page draws on its canvases: a line plot with labelled axes, and a sample.

import { niceRange, ticks } from "./axes.js";

/**
 * @param {HTMLCanvasElement} canvas
 * @param {{values: number[], color: string, label?: string}[]} series
 * @param {[number, number] | null} range the y range, or null to fit it to the values (with from: its bounds)
 * @param {number[]} [marks] sample indices to mark with a vertical line (the resets)
 * @param {number} [from] fit the y range to the values from this sample on (earlier ones may be clipped)
 * @returns {{ticks: string[], series: string[]}} the tick labels drawn and the series' labels (what the tests read)
 */
export function plot(canvas, series, range, marks = [], from = 0) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const { width: W, height: H } = canvas;
  ctx.clearRect(0, 0, W, H);
  const all = series.flatMap((s) => s.values.slice(Math.min(from, Math.max(0, s.values.length - 1)))).filter(Number.isFinite);
  if (!all.length) return { ticks: [], series: [] };
  let [lo, hi] = range && !from ? range : [Math.min(...all), Math.max(...all)];
  if (hi - lo < 1e-9 * Math.max(1, Math.abs(hi))) { const d = Math.max(Math.abs(hi) * 1e-3, 1e-6); lo -= d; hi += d; }
  let step;
  [lo, hi, step] = niceRange(lo, hi);
  if (range) { lo = Math.max(lo, range[0]); hi = Math.min(hi, range[1]); }
  const yTicks = ticks(lo, hi, 5, step);
  ctx.font = "11px system-ui"; ctx.lineWidth = 1;
  const named = series.filter((s) => s.label);
  // Room on the left for the widest tick label: narrow ranges need many digits.
  const left = 10 + Math.max(...yTicks.map((t) => ctx.measureText(t.label).width)), right = 8, bottom = 30;
  const top = named.length ? 22 : 8; // the legend's row above the frame
  const w = W - left - right, h = H - top - bottom;
  const n = Math.max(...series.map((s) => s.values.length), 2);
  const X = (/** @type {number} */ i) => left + (w * i) / (n - 1);
  const Y = (/** @type {number} */ v) => top + h * (1 - (v - lo) / (hi - lo));
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (const t of yTicks) {
    ctx.strokeStyle = "#e6eaf1"; ctx.beginPath(); ctx.moveTo(left, Y(t.value)); ctx.lineTo(left + w, Y(t.value)); ctx.stroke();
    ctx.fillStyle = "#5a6578"; ctx.fillText(t.label, left - 4, Y(t.value));
  }
  const xTicks = ticks(0, n - 1).filter((t) => Number.isInteger(t.value)).map((t) => ({ value: t.value, label: String(t.value) }));
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (const t of xTicks) ctx.fillText(t.label, X(t.value), top + h + 3);
  ctx.textAlign = "right"; ctx.fillText("sample", left + w, top + h + 16);
  ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
  const drawn = [...yTicks.map((t) => t.label), ...xTicks.map((t) => `x ${t.label}`)];
  ctx.strokeStyle = "#ccd3df"; ctx.strokeRect(left, top, w, h);
  ctx.strokeStyle = "#d33c3c";
  for (const i of marks) { ctx.beginPath(); ctx.moveTo(X(i), top); ctx.lineTo(X(i), top + h); ctx.stroke(); }
  ctx.save(); ctx.beginPath(); ctx.rect(left, top, w, h); ctx.clip(); // the first samples may leave the range
  for (const s of series) {
    ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
    s.values.forEach((v, i) => { if (i === 0) ctx.moveTo(X(i), Y(v)); else ctx.lineTo(X(i), Y(v)); });
    ctx.stroke();
  }
  ctx.restore();
  let x = left; // the legend, above the frame
  for (const s of named) {
    ctx.fillStyle = s.color; ctx.fillRect(x, 8, 14, 3);
    ctx.fillStyle = "#1d2430"; ctx.fillText(/** @type {string} */ (s.label), x + 18, 13);
    x += 28 + ctx.measureText(/** @type {string} */ (s.label)).width;
  }
  return { ticks: drawn, series: series.filter((s) => s.values.length).map((s) => s.label ?? "") };
}

/**
 * Draw a normalised sample: grey for one channel, RGB for three.
 * @param {HTMLCanvasElement} canvas
 * @param {Float32Array} x (C, S, S) normalised input
 * @param {{mean: number | number[], std: number | number[], size: number}} prep
 */
export function drawSample(canvas, x, prep) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const S = prep.size;
  const plane = S * S;
  const channels = x.length / plane;
  const mean = [prep.mean].flat();
  const std = [prep.std].flat();
  const img = ctx.createImageData(S, S);
  for (let k = 0; k < plane; k++) {
    for (let c = 0; c < 3; c++) {
      const ch = channels === 3 ? c : 0;
      const v = x[ch * plane + k] * std[ch % std.length] + mean[ch % mean.length];
      img.data[4 * k + c] = Math.max(0, Math.min(255, Math.round(v * 255)));
    }
    img.data[4 * k + 3] = 255;
  }
  const tmp = document.createElement("canvas");
  tmp.width = tmp.height = S;
  /** @type {CanvasRenderingContext2D} */ (tmp.getContext("2d")).putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, canvas.width, canvas.height);
}
