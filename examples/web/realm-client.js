// @ts-check
/**
 * RealmWebClient: SPEC §3 per sample in the browser, on artifacts written by `realm export`.
 *
 * The step's math runs in two ONNX graphs the export writes (web_decide.onnx: S_div, EATA's
 * cut, the loss weight and the next EMA; web_training_model.onnx: loss, gradients, SGD with
 * momentum and the two learning rates, α/λ projection and the non-finite guard). What is
 * JavaScript here is only the bookkeeping: which graph to run, what to keep, counters.
 * @module realm-client
 */

import { ALPHA, COUNTERS, LAMBDA, argmax, checkSample, decide, zeroCounters } from "./client-common.js";
import { ArtifactError, MANIFEST_NAME, checkOrtVersion, parseManifest, verifyFile } from "./manifest.js";

export const SAMPLE_WEIGHT = "realm.sample_weight";
export const STATE_FORMAT = "realm-tta/web-state";
export const STATE_VERSION = 1;

/**
 * @typedef {object} WebState the whole adaptation state, JSON-serialisable
 * @property {string} format STATE_FORMAT
 * @property {number} version STATE_VERSION
 * @property {string} checkpoint SHA-256 of the artifacts' checkpoint it belongs to
 * @property {string[]} names trainable tensors in buffer order
 * @property {number[]} params flat parameters
 * @property {number[]} momentum flat momentum
 * @property {number[] | null} ema EMA of past predictions
 * @property {Record<string, number>} counters counters
 */

/**
 * Fetch bytes, or null on 404 (so a missing file gets the manifest's message).
 * @param {string} url
 * @returns {Promise<Uint8Array | null>}
 */
async function fetchBytes(url) {
  const response = await fetch(url);
  if (response.status === 404) return null;
  if (!response.ok) throw new ArtifactError(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

export class RealmWebClient {
  /**
   * Use {@link RealmWebClient.load}.
   * @param {any} ort the onnxruntime-web training module
   * @param {import("./manifest.js").Manifest} manifest checked manifest
   * @param {any} session ort.TrainingSession
   * @param {any} decide ort.InferenceSession of web_decide.onnx
   * @param {Float32Array} source exported parameters (flat)
   */
  constructor(ort, manifest, session, decide, source) {
    this.ort = ort;
    this.manifest = manifest;
    this.session = session;
    this.decide = decide;
    this.source = source;
    this.layout = manifest.web.layout;
    this.classes = manifest.num_classes;
    this.sampleShape = manifest.input.shape.slice(1).map(Number);
    this.sampleSize = this.sampleShape.reduce((a, b) => a * b, 1);
    this.alphaAt = this.layout.names.indexOf(ALPHA);
    this.lambdaAt = this.layout.names.indexOf(LAMBDA);
    this.reset();
  }

  /** @type {Float32Array} current flat parameters (ORT's buffer order) */
  params = new Float32Array(0);
  /** @type {Float32Array} flat SGD momentum */
  momentum = new Float32Array(0);
  /** @type {Float32Array | null} EMA of past predictions (null before the first update) */
  ema = null;
  /** @type {Record<string, number>} */
  counters = {};
  /** @type {boolean} the ORT buffer must be written before the next call */
  _pendingLoad = false;

  /**
   * Check the manifest and every file's checksum, then start ORT on the artifacts.
   * @param {any} ort the onnxruntime-web training module (`ort` of ort.training.wasm.min.js)
   * @param {string} base URL of the artifact directory (with or without a trailing slash)
   * @returns {Promise<RealmWebClient>}
   */
  static async load(ort, base) {
    const where = base.replace(/\/$/, "");
    const raw = await fetchBytes(`${where}/${MANIFEST_NAME}`);
    if (raw === null) {
      throw new ArtifactError(`${where}/${MANIFEST_NAME} not found: not an artifact directory written by realm export`);
    }
    let data;
    try {
      data = JSON.parse(new TextDecoder().decode(raw));
    } catch (err) {
      throw new ArtifactError(`${where}/${MANIFEST_NAME} is not valid JSON (truncated or edited?): ${err}`);
    }
    const manifest = parseManifest(data, `${where}/${MANIFEST_NAME}`);
    checkOrtVersion(manifest, ort.env.versions?.web ?? "unknown");
    const names = ["checkpoint", manifest.web.training_model, "eval_model.onnx", manifest.web.decide_model];
    /** @type {Record<string, Uint8Array>} */
    const bytes = {};
    for (const name of names) {
      const got = await fetchBytes(`${where}/${name}`);
      await verifyFile(manifest, name, got, where);
      bytes[name] = /** @type {Uint8Array} */ (got);
    }
    const options = { logSeverityLevel: 3 }; // ORT's per-step warnings cost more than a step
    const session = await ort.TrainingSession.create(
      {
        checkpointState: bytes.checkpoint,
        trainModel: bytes[manifest.web.training_model],
        evalModel: bytes["eval_model.onnx"],
      },
      options,
    );
    const decide = await ort.InferenceSession.create(bytes[manifest.web.decide_model], options);
    const size = await session.getParametersSize(true);
    if (size !== manifest.web.layout.total) {
      throw new ArtifactError(`${where}: the checkpoint holds ${size} trainable values, the manifest's layout ${manifest.web.layout.total}`);
    }
    const source = new Float32Array((await session.getContiguousParameters(true)).data);
    return new RealmWebClient(ort, manifest, session, decide, source);
  }

  /** Back to the exported parameters, zero momentum, no EMA, zero counters. */
  reset() {
    this.params = new Float32Array(this.source);
    this.momentum = new Float32Array(this.layout.total);
    this.ema = null;
    this.counters = zeroCounters();
    this._pendingLoad = true;
  }

  /** @returns {number | null} current α (REALM), else null */
  get alpha() {
    return this.alphaAt < 0 ? null : this.params[this.layout.offsets[this.alphaAt]];
  }

  /** @returns {number | null} current λ (REALM), else null */
  get lambda() {
    return this.lambdaAt < 0 ? null : this.params[this.layout.offsets[this.lambdaAt]];
  }

  /**
   * One tensor of the current parameters, by name.
   * @param {string} name
   * @returns {Float32Array}
   */
  parameter(name) {
    const i = this.layout.names.indexOf(name);
    if (i < 0) throw new Error(`unknown trainable tensor ${name}`);
    const start = this.layout.offsets[i];
    return this.params.slice(start, start + this.layout.sizes[i]);
  }

  /** @param {Float32Array} x */
  _checkInput(x) {
    checkSample(x, this.sampleShape);
  }

  async _syncParameters() {
    if (!this._pendingLoad) return;
    const p = /** @type {Float32Array} */ (this.params);
    await this.session.loadParametersBuffer(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), true);
    this._pendingLoad = false;
  }

  /**
   * Logits of the current model for one sample, without any update.
   * @param {Float32Array} x one sample, `input.shape` without the batch axis
   * @returns {Promise<Float32Array>}
   */
  async predict(x) {
    this._checkInput(x);
    await this._syncParameters();
    return this._infer(this._inputTensor(x));
  }

  /** @param {Float32Array} x one sample @returns {any} it as a (1, ...input) ORT tensor */
  _inputTensor(x) {
    return new this.ort.Tensor("float32", x, [1, ...this.sampleShape]);
  }

  /** @param {any} input the sample as an ORT tensor */
  async _infer(input) {
    const feeds = {
      [this.manifest.input.name]: input,
      [SAMPLE_WEIGHT]: new this.ort.Tensor("float32", new Float32Array(1), [1]),
    };
    const out = await this.session.runEvalStep(feeds);
    return new Float32Array(out[this.manifest.logits_name].data);
  }

  /**
   * Predict on one sample, then take at most one adaptation step (SPEC §3).
   * @param {Float32Array} x one sample, `input.shape` without the batch axis
   * @returns {Promise<import("./client-common.js").StepRecord>}
   */
  async adapt(x) {
    this._checkInput(x);
    const start = performance.now();
    await this._syncParameters();
    const { Tensor } = this.ort;
    const input = this._inputTensor(x);
    const logits = await this._infer(input);
    this.counters.samples += 1;
    const decided = await decide(this.ort, this.decide, logits, this.ema);
    const { selected, cosine } = decided;
    const finite = logits.every(Number.isFinite);
    let reason = "updated";
    let updated = false;
    if (!finite) {
      reason = "nonfinite";
      this.counters.skipped_nonfinite += 1;
    } else if (!selected) {
      reason = decided.skip;
      this.counters[`skipped_${decided.skip}`] += 1;
    } else {
      const web = this.manifest.web;
      await this.session.lazyResetGrad();
      /** @type {Record<string, any>} */
      const out = await this.session.runTrainStep({
        [this.manifest.input.name]: input,
        [SAMPLE_WEIGHT]: new Tensor("float32", decided.weight, [1]),
        [web.momentum_input]: new Tensor("float32", this.momentum, [this.layout.total]),
      });
      const ok = out[web.outputs.ok].data[0];
      if (ok) {
        this.params = new Float32Array(out[web.outputs.params].data);
        this.momentum = new Float32Array(out[web.outputs.momentum].data);
        this.ema = decided.nextEma;
        this._pendingLoad = true;
        await this._syncParameters();
        this.counters.updates += 1;
        this.counters.updated_samples += 1;
        updated = true;
      } else {
        reason = "nonfinite";
        this.counters.skipped_nonfinite += 1;
      }
    }
    const top1 = argmax(logits);
    const record = {
      logits,
      top1,
      selected: finite && selected,
      updated,
      reason,
      cosine,
      alpha: this.alpha,
      lambda: this.lambda,
      ms: performance.now() - start,
    };
    if (this.manifest.config.episodic) this.reset();
    return record;
  }

  /** @returns {string} SHA-256 of the checkpoint these parameters belong to */
  get checkpointId() {
    return this.manifest.files.checkpoint;
  }

  /**
   * The whole adaptation state, as plain JSON data (for IndexedDB or a download).
   * @returns {WebState}
   */
  saveState() {
    return {
      format: STATE_FORMAT,
      version: STATE_VERSION,
      checkpoint: this.checkpointId,
      names: [...this.layout.names],
      params: Array.from(this.params),
      momentum: Array.from(this.momentum),
      ema: this.ema ? Array.from(this.ema) : null,
      counters: { ...this.counters },
    };
  }

  /**
   * Load a state from {@link saveState}; everything is checked first, so a state that does not
   * fit these artifacts throws and changes nothing.
   * @param {unknown} state
   */
  async restoreState(state) {
    const s = /** @type {Record<string, any>} */ (state ?? {});
    if (s.format !== STATE_FORMAT || s.version !== STATE_VERSION) {
      throw new Error(`not a realm-tta web state (format ${JSON.stringify(s.format)}, version ${JSON.stringify(s.version)})`);
    }
    if (s.checkpoint !== this.checkpointId) {
      throw new Error("this state belongs to other artifacts (checkpoint checksum differs)");
    }
    const n = this.layout.total;
    const vector = (/** @type {unknown} */ v, /** @type {number} */ len, /** @type {string} */ what) => {
      if (!Array.isArray(v) || v.length !== len || !v.every((e) => typeof e === "number" && Number.isFinite(e))) {
        throw new Error(`state field ${what}: expected ${len} finite numbers`);
      }
      return Float32Array.from(v);
    };
    if (JSON.stringify(s.names) !== JSON.stringify(this.layout.names)) {
      throw new Error("state field names: trainable tensors differ from these artifacts'");
    }
    const params = vector(s.params, n, "params");
    const momentum = vector(s.momentum, n, "momentum");
    const ema = s.ema === null ? null : vector(s.ema, this.classes, "ema");
    const counters = Object.fromEntries(COUNTERS.map((k) => [k, s.counters?.[k]]));
    if (!Object.values(counters).every((c) => Number.isInteger(c) && c >= 0)) {
      throw new Error(`state field counters: expected ${COUNTERS.join(", ")} as counts`);
    }
    this.params = params;
    this.momentum = momentum;
    this.ema = ema;
    this.counters = counters;
    this._pendingLoad = true;
    await this._syncParameters();
  }
}
