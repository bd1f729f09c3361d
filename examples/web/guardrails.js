// @ts-check
/**
 * What keeps a client that adapts for months useful (SPEC §10), as the Python twins run it:
 * the watch figures an app reads, the drift from the exported parameters, and the pull back
 * of the hard drift bound. (Relax and anchor are inside the step graph.)
 * @module guardrails
 */

/**
 * @typedef {object} Guardrails the manifest's `config.guardrails` (null: off)
 * @property {number | null} relax share of α − α0 and λ − λ0 given back per update
 * @property {number | null} anchor share of θ − θ0 given back per update
 * @property {number | null} max_drift hard bound of ‖θ − θ0‖ / ‖θ0‖
 * @property {number | null} collapse reset when H(mean prediction) < this · ln C
 */

export const WATCH_WINDOW = 100; // samples the watch EMAs average over: a scene, not a frame
const BETA = 1 - 1 / WATCH_WINDOW;

/**
 * @param {number | null} old
 * @param {number} value
 * @returns {number}
 */
function ema(old, value) {
  return old === null ? value : BETA * old + (1 - BETA) * value;
}

/** Running figures of the recent stream (float64, like the Python twins'). */
export class Watch {
  seen = 0; // finite samples since the last reset
  /** @type {number | null} EMA of 1 (updated) / 0 per adapt() call */
  updateRate = null;
  /** @type {number | null} EMA of the prediction entropy (nats) */
  entropyEma = null;
  /** @type {Float64Array | null} (C,) EMA of the predicted probabilities */
  marginal = null;

  /** @param {Float32Array} logits one sample's finite logits */
  see(logits) {
    let max = -Infinity;
    for (const z of logits) max = Math.max(max, z);
    let total = 0;
    for (const z of logits) total += Math.exp(z - max);
    const logTotal = Math.log(total);
    const p = new Float64Array(logits.length);
    let h = 0;
    for (let c = 0; c < logits.length; c++) {
      const logP = logits[c] - max - logTotal;
      p[c] = Math.exp(logP);
      h -= p[c] * logP;
    }
    this.entropyEma = ema(this.entropyEma, h);
    if (this.marginal === null) {
      this.marginal = p;
    } else {
      for (let c = 0; c < p.length; c++) this.marginal[c] = BETA * this.marginal[c] + (1 - BETA) * p[c];
    }
    this.seen += 1;
  }

  /** @param {boolean} updated one adapt() call's outcome */
  sawUpdate(updated) {
    this.updateRate = ema(this.updateRate, updated ? 1 : 0);
  }
}

/**
 * ‖θ − θ0‖ and ‖θ0‖ over some tensors of the flat parameter vector, in float64.
 * @param {Float32Array} params
 * @param {Float32Array} source
 * @param {{offset: number, shape: number[]}[]} slots
 * @returns {[number, number]}
 */
export function driftNorms(params, source, slots) {
  let moved = 0;
  let norm = 0;
  for (const slot of slots) {
    const end = slot.offset + slot.shape.reduce((a, b) => a * b, 1);
    for (let i = slot.offset; i < end; i++) {
      moved += (params[i] - source[i]) ** 2;
      norm += source[i] ** 2;
    }
  }
  return [Math.sqrt(moved), Math.sqrt(norm)];
}

/**
 * θ ← θ0 + share·(θ − θ0) in place, float32 operation by operation (as numpy's float32).
 * @param {Float32Array} params
 * @param {Float32Array} source
 * @param {{offset: number, shape: number[]}[]} slots
 * @param {number} share
 */
export function pullTowardSource(params, source, slots, share) {
  const f = Math.fround;
  const s32 = f(share);
  for (const slot of slots) {
    const end = slot.offset + slot.shape.reduce((a, b) => a * b, 1);
    for (let i = slot.offset; i < end; i++) params[i] = f(source[i] + f(s32 * f(params[i] - source[i])));
  }
}
