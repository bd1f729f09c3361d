// @ts-check
/**
 * RealmClient: SPEC §3 per sample on the portable step graph, for any ONNX Runtime JavaScript
 * binding (onnxruntime-web in the page, onnxruntime-node in examples/node).
 *
 * The math runs in three graphs that `realm export` writes: forward_model.onnx (the
 * prediction from the current parameters), decide_model.onnx (S_div against the EMA, EATA's
 * cut, the next EMA) and step_model.onnx (loss, gradients, SGD with momentum and the two
 * learning rates, the α/λ projection and a finite flag). This module keeps the state between
 * calls (the flat parameters and momentum, the EMA, the counters) and writes and reads it in
 * the SDK's own state file (state-file.js), so a state moves between Python, Node and the
 * browser. It is `RealmRuntime`'s sequence, with its three schedules.
 * @module realm-portable
 */

import { WATCH_WINDOW, Watch, driftNorms, pullTowardSource } from "./guardrails.js";
import {
  ALPHA,
  COUNTERS,
  COUNTERS_SINCE_2,
  LAMBDA,
  argmax,
  checkSample,
  decide,
  zeroCounters,
} from "./client-common.js";
import {
  ArtifactError,
  MANIFEST_NAME,
  SIGNATURE_NAME,
  checkSignature,
  portableFiles,
  readManifest,
  verifyFile,
} from "./manifest.js";
import { StateFileError, float32Array, parseNpy, readState, writeState } from "./state-file.js";


/**
 * Reads one artifact file by name; null when it does not exist.
 * @callback ReadFile
 * @param {string} name
 * @returns {Promise<Uint8Array | null>}
 */

/**
 * @typedef {object} ClientOptions
 * @property {number} [threads] ONNX Runtime's intra-op threads (default: its own)
 * @property {string[]} [executionProviders] e.g. ["cpu"], ["webgpu", "wasm"]
 * @property {string[] | null} [trustedKeys] base64 Ed25519 public keys (realm keygen's .pub): the
 *   artifacts must be signed by one of them (default null: a signature is optional, but one
 *   that is present must verify)
 * @property {"auto" | "train" | "infer-first"} [schedule] as RealmRuntime's: "train" runs the
 *   step graph at once and takes its logits; "infer-first" runs the forward graph, decides,
 *   and steps only for a sample that updates; "auto" (default) picks the cheaper for the
 *   observed update rate
 */

const REPROBE_EVERY = 100; // auto schedule: samples between re-timings of the path not taken
const TIMING_WINDOW = 8; // auto schedule: a graph's cost is the fastest of its last 8 calls
const MIN_TIMED = 3; // auto schedule: timed calls of each graph before the two are compared

export class RealmClient {
  /**
   * Check the manifest and every file's checksum, then open the three graphs.
   * @param {any} ort an ONNX Runtime JavaScript module (onnxruntime-node, onnxruntime-web)
   * @param {ReadFile} read reads an artifact file (fetch in a page, fs in Node)
   * @param {string} where the artifact directory, for messages
   * @param {ClientOptions} [options]
   * @returns {Promise<RealmClient>}
   */
  static async load(ort, read, where, options = {}) {
    const raw = await read(MANIFEST_NAME);
    if (raw === null) {
      throw new ArtifactError(`${where}/${MANIFEST_NAME} not found: not an artifact directory written by realm export`);
    }
    // The signature first: nothing in the manifest is used before it holds.
    const signature = await checkSignature(raw, await read(SIGNATURE_NAME), options.trustedKeys ?? null, where);
    const manifest = await readManifest(raw, `${where}/${MANIFEST_NAME}`);
    const p = manifest.portable;
    /** @type {Record<string, Uint8Array>} */
    const bytes = {};
    // The step and forward graphs' weights, stored once beside them (exported since the
    // shared weights file): handed to both sessions as their external data.
    const weights = p.weights?.file;
    for (const name of portableFiles(p)) {
      const got = await read(name);
      await verifyFile(manifest, name, got, where);
      bytes[name] = /** @type {Uint8Array} */ (got);
    }
    const source = parseNpy(bytes[p.source_params], p.source_params);
    if (source.dtype !== "<f4" || source.data.length !== p.size) {
      throw new ArtifactError(`${where}/${p.source_params}: expected ${p.size} float32 values`);
    }
    /** @type {Record<string, any>} */
    const sessionOptions = { logSeverityLevel: 3, graphOptimizationLevel: "all" };
    if (options.threads) sessionOptions.intraOpNumThreads = options.threads;
    if (options.executionProviders) sessionOptions.executionProviders = options.executionProviders;
    const open = (/** @type {string} */ name, shared = false) =>
      ort.InferenceSession.create(
        bytes[name],
        shared && weights ? { ...sessionOptions, externalData: [{ path: weights, data: bytes[weights] }] } : sessionOptions,
      );
    // One after the other: onnxruntime-web's WebGPU provider refuses to create two sessions at
    // once ("another WebGPU EP inference session is being created").
    const step = await open(p.step_model, true);
    const forward = await open(p.forward_model, true);
    const decide = await open(p.decide_model);
    const client = new RealmClient(ort, manifest, step, forward, decide, /** @type {Float32Array} */ (source.data));
    const schedule = options.schedule ?? "auto";
    if (!["auto", "train", "infer-first"].includes(schedule)) {
      throw new RangeError(`schedule must be "auto", "train" or "infer-first", got ${JSON.stringify(schedule)}`);
    }
    client.schedule = schedule;
    client.signature = signature;
    return client;
  }

  /**
   * Use {@link RealmClient.load}.
   * @param {any} ort
   * @param {import("./manifest.js").Manifest} manifest checked manifest
   * @param {any} step InferenceSession of step_model.onnx
   * @param {any} forward InferenceSession of forward_model.onnx
   * @param {any} decide InferenceSession of decide_model.onnx
   * @param {Float32Array} source the exported realm.params
   */
  constructor(ort, manifest, step, forward, decide, source) {
    this.ort = ort;
    this.manifest = manifest;
    this.step = step;
    this.forward = forward;
    this.decide = decide;
    this.source = source;
    this.layout = manifest.portable.layout;
    this.classes = manifest.num_classes;
    this.sampleShape = manifest.input.shape.slice(1).map(Number);
    this.sampleSize = this.sampleShape.reduce((a, b) => a * b, 1);
    const config = manifest.config;
    /** @type {Record<string, number>} the step graph's scalar inputs it declares */
    this.hyper = {};
    const e0 = config.entropy_margin ?? 0.4 * Math.log(this.classes);
    const values = {
      "realm.lr": config.lr,
      "realm.lr_alpha_lambda": config.lr_alpha_lambda,
      "realm.momentum": config.momentum,
      "realm.entropy_margin": e0,
      "realm.sam_rho": config.sam_rho ?? 0.05,
    };
    for (const [name, value] of Object.entries(values)) {
      if (step.inputNames.includes(name)) this.hyper[name] = value;
    }
    this.reset();
  }

  /** @type {import("./manifest.js").SignatureCheck} what was found about realm.sig */
  signature = { key: null, verified: false, note: "unsigned" };
  /** @type {Float32Array} current realm.params */
  params = new Float32Array(0);
  /** @type {Float32Array} realm.velocity: SGD momentum, same layout */
  velocity = new Float32Array(0);
  /** @type {Float32Array | null} EMA of past predictions (null before the first update) */
  ema = null;
  /** @type {Record<string, number>} */
  counters = {};
  /** @type {"auto" | "train" | "infer-first"} */
  schedule = "auto";
  /** @type {{train: number[], infer: number[]}} ms of each graph's last timed calls */
  _recent = { train: [], infer: [] };
  _timed = { train: 0, infer: 0 };
  _rate = 1; // EMA of the share of samples that update
  _calls = 0;

  /** @type {Watch} the recent stream's figures (SPEC §10) */
  watch = new Watch();
  /** @type {number | null} SAR: EMA of its second-pass loss since the last reset */
  lossEma = null;

  /** Back to the exported parameters, zero momentum, no EMA, zero counters. */
  reset() {
    this._resetState();
    this.counters = zeroCounters();
  }

  /** The exported parameters, zero momentum, no EMA, an empty watch; counters kept. */
  _resetState() {
    this.params = new Float32Array(this.source);
    this.velocity = new Float32Array(this.source.length);
    this.ema = null;
    this.watch = new Watch();
    this.lossEma = null;
  }

  /** @returns {import("./guardrails.js").Guardrails} the guardrails in force (none: off) */
  get guardrails() {
    return this.manifest.config.guardrails ?? { relax: null, anchor: null, max_drift: null, collapse: null };
  }

  /** @returns {number} ‖θ − θ0‖ / ‖θ0‖ over the adapted norm tensors (α, λ excluded) */
  get drift() {
    const [moved, source] = driftNorms(this.params, this.source, this._normSlots());
    return source > 0 ? moved / source : 0;
  }

  /** @returns {import("./manifest.js").PortableSlot[]} */
  _normSlots() {
    return this.layout.filter((s) => s.name !== ALPHA && s.name !== LAMBDA);
  }

  /** The hard drift bound after an applied update (relax and anchor are the step graph's). */
  _guardUpdate() {
    const bound = this.guardrails.max_drift;
    if (bound === null || bound === undefined) return;
    const drift = this.drift;
    if (drift > bound) {
      pullTowardSource(this.params, this.source, this._normSlots(), bound / drift);
      this.counters.drift_clips += 1;
    }
  }

  /** Back to the source when recent predictions fall onto few classes (SPEC §10). */
  _guardCollapse() {
    const limit = this.guardrails.collapse;
    const marginal = this.watch.marginal;
    if (limit === null || limit === undefined || marginal === null || this.watch.seen < WATCH_WINDOW) return;
    let spread = 0;
    for (const m of marginal) spread -= m * Math.log(Math.max(m, 1e-12));
    if (spread < limit * Math.log(this.classes) && this.drift > 0) {
      this._resetState();
      this.counters.resets_collapse += 1;
    }
  }

  /**
   * SAR's model recovery: back to the source when the EMA of its loss falls below e_m.
   * @param {number} loss this update's (second-pass) loss
   */
  _recover(loss) {
    const ema = this.lossEma === null ? loss : 0.9 * this.lossEma + 0.1 * loss;
    this.lossEma = ema;
    if (ema < (this.manifest.config.recovery_loss ?? 0.2)) {
      this._resetState();
      this.counters.resets_recovery += 1;
    }
  }

  /**
   * @param {string} name
   * @returns {import("./manifest.js").PortableSlot | undefined}
   */
  _slot(name) {
    return this.layout.find((s) => s.name === name);
  }

  /** @returns {string} the manifest's seal: names these artifacts (a state file, a storage key) */
  get artifactsId() {
    return this.manifest.manifest_sha256;
  }

  /** @returns {number | null} current α (REALM), else null */
  get alpha() {
    const slot = this._slot(ALPHA);
    return slot ? this.params[slot.offset] : null;
  }

  /** @returns {number | null} current λ (REALM), else null */
  get lambda() {
    const slot = this._slot(LAMBDA);
    return slot ? this.params[slot.offset] : null;
  }

  /** @returns {string[]} the adapted norm tensors, as the SDK names them */
  get trainableNames() {
    return this.layout.map((s) => s.name).filter((n) => n !== ALPHA && n !== LAMBDA);
  }

  /**
   * One tensor of a flat vector, by name.
   * @param {string} name
   * @param {Float32Array} [vector] default: the parameters
   * @returns {Float32Array}
   */
  parameter(name, vector = this.params) {
    const slot = this._slot(name);
    if (!slot) throw new Error(`unknown trainable tensor ${name}`);
    return vector.slice(slot.offset, slot.offset + slot.shape.reduce((a, b) => a * b, 1));
  }

  /** @param {Float32Array} x */
  _checkInput(x) {
    checkSample(x, this.sampleShape);
  }

  /**
   * @param {Float32Array} data
   * @param {number[]} dims
   */
  _f32(data, dims) {
    return new this.ort.Tensor("float32", data, dims);
  }

  /**
   * Logits of the current model for one sample, without any update.
   * @param {Float32Array} x one sample, `input.shape` without the batch axis
   * @returns {Promise<Float32Array>}
   */
  async predict(x) {
    this._checkInput(x);
    return this._infer(x);
  }

  /** @param {Float32Array} x */
  async _infer(x) {
    const out = await this.forward.run({
      [this.manifest.input.name]: this._f32(x, [1, ...this.sampleShape]),
      "realm.params": this._f32(this.params, [this.params.length]),
    });
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
    const trainFirst = this._trainFirst();
    this._calls += 1;
    /** @type {Record<string, any> | null} */
    let out = null;
    /** @type {Float32Array} */
    let logits;
    if (trainFirst) {
      out = await this._step(x);
      logits = new Float32Array(out[this.manifest.logits_name].data);
    } else {
      logits = await this._timedInfer(x);
    }
    this.counters.samples += 1;
    const finite = logits.every(Number.isFinite);
    if (finite) this.watch.see(logits);
    let reason = "updated";
    let updated = false;
    let selected = false;
    let cosine = NaN;
    if (!finite) {
      reason = "nonfinite";
      this.counters.skipped_nonfinite += 1;
    } else {
      const decided = await decide(this.ort, this.decide, logits, this.ema);
      ({ selected, cosine } = decided);
      this._rate = 0.95 * this._rate + 0.05 * (selected ? 1 : 0);
      if (!selected) {
        reason = decided.skip;
        this.counters[`skipped_${decided.skip}`] += 1;
      } else {
        out ??= await this._step(x);
        // SAR: the sample cut again at the perturbed point (no such output: it is kept).
        const kept = out["realm.kept"] ? Math.round(out["realm.kept"].data[0]) : 1;
        if (kept === 0) {
          reason = "entropy";
          this.counters.skipped_entropy += 1;
        } else if (out["realm.finite"].data[0]) {
          this.params = new Float32Array(out["realm.new_params"].data);
          this.velocity = new Float32Array(out["realm.new_velocity"].data);
          this.ema = decided.nextEma;
          this.counters.updates += 1;
          this.counters.updated_samples += 1;
          updated = true;
          this._guardUpdate();
          if (this.manifest.config.method === "sar") this._recover(out["realm.loss"].data[0]);
        } else {
          reason = "nonfinite";
          this.counters.skipped_nonfinite += 1;
        }
      }
    }
    this.watch.sawUpdate(updated);
    if (finite) this._guardCollapse();
    const top1 = argmax(logits);
    const record = { logits, top1, selected, updated, reason, cosine, alpha: this.alpha, lambda: this.lambda, ms: performance.now() - start };
    if (this.manifest.config.episodic) this._resetState();
    return record;
  }

  /**
   * One call of the step graph (forward, loss, gradients, the update) on one sample.
   * @param {Float32Array} x
   * @returns {Promise<Record<string, any>>}
   */
  async _step(x) {
    const start = performance.now();
    /** @type {Record<string, any>} */
    const feeds = {
      [this.manifest.input.name]: this._f32(x, [1, ...this.sampleShape]),
      // S_div's weight for one kept sample; EATA's own factor is computed in the graph.
      "realm.sample_weight": this._f32(Float32Array.of(1), [1]),
      "realm.params": this._f32(this.params, [this.params.length]),
      "realm.velocity": this._f32(this.velocity, [this.velocity.length]),
    };
    for (const [name, value] of Object.entries(this.hyper)) feeds[name] = this._f32(Float32Array.of(value), []);
    const out = await this.step.run(feeds);
    this._note("train", performance.now() - start);
    return out;
  }

  /** @param {Float32Array} x */
  async _timedInfer(x) {
    const start = performance.now();
    const logits = await this._infer(x);
    this._note("infer", performance.now() - start);
    return logits;
  }

  /**
   * @param {"train" | "infer"} kind
   * @param {number} ms
   */
  _note(kind, ms) {
    this._timed[kind] += 1;
    if (this._timed[kind] === 1) return; // a graph's first call includes ORT's set-up
    const recent = this._recent[kind];
    recent.push(ms);
    if (recent.length > TIMING_WINDOW) recent.shift();
  }

  /** @returns {boolean} the schedule's choice for this sample (RealmRuntime's rule) */
  _trainFirst() {
    if (this.schedule !== "auto") return this.schedule === "train";
    // Measure the step first (its first call is set-up, then MIN_TIMED timed), then the
    // forward graph: one slow early call must not decide.
    if (this._recent.train.length < MIN_TIMED) return true;
    if (this._recent.infer.length < MIN_TIMED) return false;
    const train = Math.min(...this._recent.train);
    const infer = Math.min(...this._recent.infer);
    const trainFirst = infer + this._rate * train >= train;
    // Re-time the path not taken now and then: one slow measurement cannot pin the choice.
    return this._calls % REPROBE_EVERY === 0 ? !trainFirst : trainFirst;
  }

  // ---------------------------------------------------------------- the SDK's state file

  /**
   * The whole adaptation state as the SDK's state file (`RealmRuntime.restore` reads it).
   * @returns {Uint8Array}
   */
  saveState() {
    /** @type {Map<string, import("./state-file.js").NpyArray>} */
    const arrays = new Map();
    for (const name of this.trainableNames) {
      const shape = /** @type {import("./manifest.js").PortableSlot} */ (this._slot(name)).shape;
      arrays.set(`param/${name}`, float32Array(this.parameter(name), shape));
      arrays.set(`momentum/${name}`, float32Array(this.parameter(name, this.velocity), shape));
    }
    const config = this.manifest.config;
    const scalar = (/** @type {string} */ name, /** @type {Float32Array} */ v, /** @type {number} */ otherwise) =>
      float32Array([this._slot(name) ? this.parameter(name, v)[0] : otherwise], []);
    arrays.set("alpha", scalar(ALPHA, this.params, config.alpha0));
    arrays.set("lam", scalar(LAMBDA, this.params, config.lambda0));
    arrays.set("alpha_momentum", scalar(ALPHA, this.velocity, 0));
    arrays.set("lam_momentum", scalar(LAMBDA, this.velocity, 0));
    if (this.ema) arrays.set("ema", float32Array(this.ema, [this.classes]));
    const w = this.watch;
    const watched = { update_rate: w.updateRate, entropy_ema: w.entropyEma, loss_ema: this.lossEma };
    for (const [key, value] of Object.entries(watched)) {
      if (value !== null) arrays.set(`watch/${key}`, float32Array([value], []));
    }
    if (w.marginal) arrays.set("watch/marginal", float32Array(w.marginal, [this.classes]));
    const header = {
      method: config.method,
      num_classes: this.classes,
      trainable: this.trainableNames,
      counters: { ...this.counters },
      config,
      artifacts: this.artifactsId,
      watch_seen: w.seen,
    };
    return writeState(header, arrays);
  }

  /**
   * Load a state file written by {@link saveState}, `RealmRuntime.save` or the SDK. Everything
   * is checked first: a state that does not fit these artifacts throws and changes nothing.
   * @param {Uint8Array} bytes the file's content
   */
  restoreState(bytes) {
    const { header, arrays } = readState(bytes);
    const config = this.manifest.config;
    if (header.method !== config.method || header.num_classes !== this.classes) {
      throw new StateFileError(`the state is for method ${header.method} with ${header.num_classes} classes, these artifacts run ${config.method} with ${this.classes}`);
    }
    const savedFor = header.artifacts ?? null;
    if (savedFor !== null && typeof savedFor !== "string") throw new StateFileError("header field artifacts is not a digest string");
    if (savedFor !== null && savedFor !== this.artifactsId) {
      throw new StateFileError(`saved with other artifacts (manifest ${savedFor.slice(0, 16)}…), these are ${this.artifactsId.slice(0, 16)}…: a state belongs to the export it adapted`);
    }
    if (JSON.stringify(header.trainable) !== JSON.stringify(this.trainableNames)) {
      throw new StateFileError("the state's trainable tensors differ from these artifacts'");
    }
    const params = new Float32Array(this.source.length);
    const velocity = new Float32Array(this.source.length);
    /**
     * @param {string} key
     * @param {number[]} shape
     */
    const take = (key, shape) => {
      const a = arrays.get(key);
      if (!a || a.dtype !== "<f4" || JSON.stringify(a.shape) !== JSON.stringify(shape)) {
        throw new StateFileError(`${key}: missing, or not float32 of shape (${shape.join(", ")})`);
      }
      if (!a.data.every(Number.isFinite)) throw new StateFileError(`${key}: non-finite values`);
      return /** @type {Float32Array} */ (a.data);
    };
    for (const slot of this.layout) {
      const [p, v] =
        slot.name === ALPHA ? [take("alpha", []), take("alpha_momentum", [])]
        : slot.name === LAMBDA ? [take("lam", []), take("lam_momentum", [])]
        : [take(`param/${slot.name}`, slot.shape), take(`momentum/${slot.name}`, slot.shape)];
      params.set(p, slot.offset);
      velocity.set(v, slot.offset);
    }
    const ema = arrays.has("ema") ? new Float32Array(take("ema", [this.classes])) : null;
    const since2 = header.version === 1 ? COUNTERS_SINCE_2 : [];
    const counters = Object.fromEntries(
      COUNTERS.map((k) => [k, since2.includes(k) ? (header.counters?.[k] ?? 0) : header.counters?.[k]]),
    );
    if (!Object.values(counters).every((c) => Number.isInteger(c) && c >= 0)) {
      throw new StateFileError(`counters: expected ${COUNTERS.join(", ")} as counts`);
    }
    const seen = header.watch_seen ?? null;
    if (seen !== null && !(Number.isInteger(seen) && seen >= 0)) throw new StateFileError("header field watch_seen is not a count");
    const scalarOf = (/** @type {string} */ key) => (arrays.has(key) ? take(key, [])[0] : null);
    const watch = new Watch();
    let lossEma = null;
    if (seen !== null) {
      watch.seen = seen;
      watch.updateRate = scalarOf("watch/update_rate");
      watch.entropyEma = scalarOf("watch/entropy_ema");
      watch.marginal = arrays.has("watch/marginal") ? Float64Array.from(take("watch/marginal", [this.classes])) : null;
      lossEma = scalarOf("watch/loss_ema");
    }
    this.params = params;
    this.velocity = velocity;
    this.ema = ema;
    this.counters = counters;
    this.watch = watch;
    this.lossEma = lossEma;
  }
}
