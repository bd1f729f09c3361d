// @ts-check
/**
 * What the JavaScript client shares with the pages and apps that embed it: the names, the
 * counters, the per-sample record, the input check, the prediction and the decision graph's
 * call.
 * @module client-common
 */

export const ALPHA = "realm.alpha";
export const LAMBDA = "realm.lambda";
export const COUNTERS = /** @type {const} */ ([
  "samples",
  "updates",
  "updated_samples",
  "skipped_diversity",
  "skipped_entropy",
  "skipped_nonfinite",
  "resets_recovery",
  "resets_collapse",
  "drift_clips",
]);
/** The counters a version-1 state file does not have: zero when it is restored. */
export const COUNTERS_SINCE_2 = ["resets_recovery", "resets_collapse", "drift_clips"];

/**
 * @typedef {object} StepRecord what one adapt() did
 * @property {Float32Array} logits pre-update logits (this sample's prediction)
 * @property {number} top1 predicted class
 * @property {boolean} selected passed the entropy and S_div filters
 * @property {boolean} updated the parameters changed
 * @property {string} reason "updated", "diversity", "entropy" or "nonfinite"
 * @property {number} cosine cosine of the prediction to the EMA (NaN before the first update)
 * @property {number | null} alpha α after the step (REALM), else null
 * @property {number | null} lambda λ after the step (REALM), else null
 * @property {number} ms wall time of the call
 */

/** @returns {Record<string, number>} every counter at zero */
export function zeroCounters() {
  return Object.fromEntries(COUNTERS.map((k) => [k, 0]));
}

/**
 * Refuse a sample that is not one finite float32 input of the model's shape, naming why.
 * @param {unknown} x
 * @param {number[]} shape the sample's shape (the input's without the batch axis)
 */
export function checkSample(x, shape) {
  if (!(x instanceof Float32Array)) {
    throw new TypeError(`input must be a Float32Array, got ${Object.prototype.toString.call(x)}`);
  }
  const size = shape.reduce((a, b) => a * b, 1);
  if (x.length !== size) {
    throw new RangeError(`input has ${x.length} values; the model takes one sample of shape (${shape.join(", ")}) = ${size}`);
  }
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i])) throw new RangeError(`input value ${i} is not finite (${x[i]})`);
  }
}

/**
 * The predicted class: the first largest logit (numpy's argmax).
 * @param {Float32Array} logits
 * @returns {number}
 */
export function argmax(logits) {
  let top1 = 0;
  for (let c = 1; c < logits.length; c++) if (logits[c] > logits[top1]) top1 = c;
  return top1;
}

/**
 * @typedef {object} Decision SPEC §3's step 2 for one sample (decide_model.onnx's outputs)
 * @property {boolean} selected the sample passes EATA's cut and S_div: it updates
 * @property {"entropy" | "diversity"} skip which filter refused it, when not selected
 * @property {number} cosine cosine of the prediction to the EMA (NaN without an EMA)
 * @property {Float32Array} weight its loss weight (1, or EATA's exp(−(H − e0)); 0 if not kept)
 * @property {Float32Array} nextEma the EMA to commit if the update happens
 */

/**
 * Run the decision graph on one sample's pre-update logits.
 * @param {any} ort the ONNX Runtime JavaScript module (for its Tensor)
 * @param {any} session InferenceSession of decide_model.onnx
 * @param {Float32Array} logits (C,) pre-update logits
 * @param {Float32Array | null} ema the EMA of past predictions (null before the first update)
 * @returns {Promise<Decision>}
 */
export async function decide(ort, session, logits, ema) {
  const classes = logits.length;
  const out = await session.run({
    logits: new ort.Tensor("float32", logits, [1, classes]),
    ema: new ort.Tensor("float32", ema ?? new Float32Array(classes), [classes]),
    has_ema: new ort.Tensor("bool", Uint8Array.from([ema ? 1 : 0]), []),
  });
  return {
    selected: Boolean(out.keep.data[0]),
    skip: out.passed_entropy.data[0] ? "diversity" : "entropy",
    cosine: ema ? out.cosine.data[0] : NaN,
    weight: new Float32Array(out.weight.data),
    nextEma: new Float32Array(out.next_ema.data),
  };
}
