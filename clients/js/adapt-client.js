// @ts-check
/**
 * The one adapt graph from JavaScript (onnxruntime-web in a page, onnxruntime-node): a client
 * that knows only the manifest's "adapt" section (docs/adapt.md). Per sample it runs the
 * graph and keeps each state's next value; the decision, the step, the guardrails and the
 * counters are the graph's, and this module does no arithmetic of its own on them. The state
 * stays in the session's tensors between calls (on the GPU with `stateOnGpu`), and is the
 * state file's content: `saveState()` writes exactly these tensors (the SDK's state file,
 * state-file.js), which `RealmRuntime.restore` and `RealmAdapter.restore` read.
 * The JavaScript twin of realm_runtime/_runtime.py's RealmRuntime on the adapt graph.
 * @module adapt-client
 */

import {
  ALPHA_NAME,
  COUNTERS_NAME,
  EMA_NAME,
  EPISODIC_NAME,
  FIGURE_ENTROPY_EMA,
  FIGURE_LOSS_EMA,
  FIGURE_UPDATE_RATE,
  KNOWN_EMA,
  KNOWN_LOSS_EMA,
  KNOWN_NAME,
  KNOWN_UPDATE_RATE,
  KNOWN_WATCH,
  LAMBDA_NAME,
  MANIFEST_NAME,
  MARGINAL_NAME,
  PARAMS_NAME,
  SEEN_NAME,
  SETTINGS_NAME,
  SIGNATURE_NAME,
  VELOCITY_NAME,
  WATCH_NAME,
} from "./contract.js";
import { ArtifactError, readManifest, verifyFile } from "./manifest.js";
import { checkSignature } from "./signing.js";
import { StateFileError, parseNpy, readState, writeState } from "./state-file.js";

/**
 * @callback ReadFile
 * @param {string} name a file of the artifact directory
 * @returns {Promise<Uint8Array | null>} its bytes, or null if it is not there
 */

/**
 * @typedef {object} AdaptStep what one call did
 * @property {Float32Array} logits (C,) the prediction, before this sample's update
 * @property {number} top1 the predicted class
 * @property {boolean} selected the sample passed the filters
 * @property {boolean} updated the step was applied
 * @property {string} reason "updated", "diversity", "entropy" or "nonfinite"
 * @property {number} loss the step's loss where selected, else 0
 * @property {number | null} alpha α after the call (REALM, state on the host), else null
 * @property {number | null} lambda λ after the call, likewise
 * @property {number} ms wall time of the call
 */

/**
 * @typedef {object} WatchFigures what an app can watch (SPEC §10), as the graph keeps them
 * @property {number} seen finite samples since the last reset
 * @property {number | null} updateRate EMA of the share of samples that updated
 * @property {number | null} entropyEma EMA of the prediction entropy (nats)
 * @property {Float32Array | null} marginal (C,) EMA of the predictions
 */

/**
 * @typedef {object} AdaptOptions
 * @property {number} [threads] ONNX Runtime's intra-op threads (default: its own)
 * @property {any[]} [executionProviders] e.g. ["cpu"], ["webgpu", "wasm"]
 * @property {string[] | null} [trustedKeys] base64 Ed25519 public keys (realm keygen's .pub):
 *   the artifacts must be signed by one of them (default null: a signature is optional, but
 *   one that is present must verify)
 * @property {boolean} [stateOnGpu] keep the parameter vectors in GPU buffers between calls
 *   (WebGPU): downloaded only by {@link AdaptClient.hostState} and {@link AdaptClient.saveState}
 * @property {Record<string, number|boolean>} [settings] settings to change without
 *   re-exporting, by name (a slot of realm.settings: the manifest's adapt.settings, e.g.
 *   "realm.lr"; "realm.episodic" takes true or false), instead of the export's values
 */

/**
 * The initial settings vector with the app's changes written into their slots.
 * @param {import("./state-file.js").NpyArray} exported realm.settings as the export wrote it
 * @param {string[]} names its slots (the manifest's adapt.settings)
 * @param {Record<string, number|boolean>} wanted setting name → its value for this app
 * @returns {import("./state-file.js").NpyArray}
 */
function withSettings(exported, names, wanted) {
  const data = Float32Array.from(/** @type {Float32Array} */ (exported.data));
  for (const [name, value] of Object.entries(wanted)) {
    const slot = names.indexOf(name);
    if (slot < 0) {
      throw new RangeError(`no setting named ${JSON.stringify(name)}: this graph takes ${names.join(", ")}`);
    }
    if (name === EPISODIC_NAME) {
      if (typeof value !== "boolean") throw new RangeError(`setting ${name} must be true or false, got ${value}`);
      data[slot] = value ? 1 : 0;
    } else {
      if (typeof value !== "number" || !Number.isFinite(value)) {
        throw new RangeError(`setting ${name} must be a finite number, got ${value}`);
      }
      data[slot] = value;
    }
  }
  return { ...exported, data };
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

/** The large float32 state, kept on the GPU between calls where asked (WebGPU). */
const FLOAT_STATE = [PARAMS_NAME, VELOCITY_NAME];

/** Tensor types of the .npy dtypes an initial state holds. */
const TENSOR_TYPE = { "<f4": "float32", "<i8": "int64", "|b1": "bool", "|u1": "uint8" };
/** .npy dtypes of the tensor types, for the state file. */
const NPY_TYPE = { float32: "<f4", int64: "<i8", bool: "|b1", uint8: "|u1" };

export class AdaptClient {
  /**
   * Check the manifest, its signature and every file the graph reads, then open the graph.
   * @param {any} ort an ONNX Runtime JavaScript module
   * @param {ReadFile} read reads an artifact file (fetch in a page, fs in Node)
   * @param {string} where the artifact directory, for messages
   * @param {AdaptOptions} [options]
   * @returns {Promise<AdaptClient>}
   */
  static async load(ort, read, where, options = {}) {
    const raw = await read(MANIFEST_NAME);
    if (raw === null) {
      throw new ArtifactError(`${where}/${MANIFEST_NAME} not found: not an artifact directory written by realm export`);
    }
    // The signature first: nothing in the manifest is used before it holds.
    const signature = await checkSignature(raw, await read(SIGNATURE_NAME), options.trustedKeys ?? null, where);
    const manifest = await readManifest(raw, `${where}/${MANIFEST_NAME}`);
    const spec = manifest.adapt;
    if (!spec || !spec.file) {
      const why = spec?.error ? `: ${spec.error}` : "; re-export with a current realm-tta";
      throw new ArtifactError(`${where}/${MANIFEST_NAME}: no adapt graph${why}`);
    }
    /** @param {string} name */
    const verified = async (name) => {
      const bytes = await read(name);
      await verifyFile(manifest, name, bytes, where);
      return /** @type {Uint8Array} */ (bytes);
    };
    /** @type {Record<string, any>} */
    // No memory-pattern planner (as RealmRuntime): it keeps a block sized for a whole run.
    const sessionOptions = { logSeverityLevel: 3, graphOptimizationLevel: "all", enableMemPattern: false };
    if (options.threads) sessionOptions.intraOpNumThreads = options.threads;
    if (options.executionProviders) sessionOptions.executionProviders = options.executionProviders;
    const weights = manifest.portable.weights?.file;
    if (weights) {
      sessionOptions.externalData = [{ path: weights, data: await verified(weights) }];
    }
    if (options.stateOnGpu) {
      /** @type {Record<string, string>} */
      const location = {};
      for (const entry of spec.state) location[entry.output] = "cpu";
      for (const name of FLOAT_STATE) {
        const entry = spec.state.find((e) => e.input === name);
        if (entry) location[entry.output] = "gpu-buffer";
      }
      sessionOptions.preferredOutputLocation = location;
    }
    const session = await ort.InferenceSession.create(await verified(spec.file), sessionOptions);
    /** @type {Map<string, import("./state-file.js").NpyArray>} */
    const initial = new Map();
    for (const entry of spec.state) initial.set(entry.input, parseNpy(await verified(entry.initial), entry.initial));
    const exported = /** @type {import("./state-file.js").NpyArray} */ (initial.get(SETTINGS_NAME));  // the manifest's check
    initial.set(SETTINGS_NAME, withSettings(exported, spec.settings, options.settings ?? {}));
    const client = new AdaptClient(ort, manifest, session, initial);
    client.signature = signature;
    return client;
  }

  /**
   * Use {@link AdaptClient.load}.
   * @param {any} ort
   * @param {import("./manifest.js").Manifest} manifest
   * @param {any} session the adapt graph's InferenceSession
   * @param {Map<string, import("./state-file.js").NpyArray>} initial state input → its
   *   initial value (the export's files)
   */
  constructor(ort, manifest, session, initial) {
    this.ort = ort;
    this.manifest = manifest;
    this.spec = /** @type {import("./manifest.js").AdaptSection} */ (manifest.adapt);
    this.session = session;
    this.initial = initial;
    this.layout = manifest.portable.layout;
    this.classes = manifest.num_classes;
    this.sampleShape = manifest.input.shape.slice(1).map(Number);
    this.inputShape = [1, ...this.sampleShape];
    /** @type {Float32Array} the exported realm.params */
    this.source = /** @type {Float32Array} */ (/** @type {any} */ (initial.get(PARAMS_NAME)).data);
    /** @type {Record<string, any>} graph input name → its current tensor */
    this.state = {};
    this.reset();
  }

  /** @type {import("./signing.js").SignatureCheck} what was found about realm.sig */
  signature = { key: null, verified: false, note: "unsigned" };

  /** @returns {string} the manifest's seal: names these artifacts (a state file, a storage key) */
  get artifactsId() {
    return this.manifest.manifest_sha256;
  }

  /** @returns {string[]} the adapted norm tensors, as the SDK names them */
  get trainableNames() {
    return this.layout.map((s) => s.name).filter((n) => n !== ALPHA_NAME && n !== LAMBDA_NAME);
  }

  /** Back to the exported state: source parameters, zero momentum, no EMA, zero counters. */
  reset() {
    this._replace(Object.fromEntries([...this.initial].map(([name, a]) => [name, this._tensor(a)])));
  }

  /**
   * One sample through the graph; the state moves on.
   * @param {Float32Array} sample the preprocessed input, one sample (C, H, W) in C order
   * @returns {Promise<AdaptStep>}
   */
  async adapt(sample) {
    checkSample(sample, this.sampleShape);
    const start = performance.now();
    const feeds = { ...this.state, [this.spec.input]: new this.ort.Tensor("float32", sample, this.inputShape) };
    const out = await this.session.run(feeds);
    this._replace(Object.fromEntries(this.spec.state.map((e) => [e.input, out[e.output]])));
    const logits = new Float32Array(out[this.spec.logits].data);
    let top1 = 0;
    for (let k = 1; k < logits.length; k++) if (logits[k] > logits[top1]) top1 = k;
    return {
      logits,
      top1,
      selected: Boolean(out[this.spec.selected].data[0]),
      updated: Boolean(out[this.spec.updated].data[0]),
      reason: this.spec.reasons[Number(out[this.spec.reason].data[0])],
      loss: Number(out[this.spec.loss].data[0]),
      alpha: this.alpha,
      lambda: this.lambda,
      ms: performance.now() - start,
    };
  }

  /**
   * Take new state tensors, releasing the GPU buffers of the ones they replace.
   * @param {Record<string, any>} next
   */
  _replace(next) {
    for (const [name, tensor] of Object.entries(next)) {
      const old = this.state[name];
      if (old && old !== tensor && old.location === "gpu-buffer") old.dispose();
      this.state[name] = tensor;
    }
  }

  /**
   * @param {import("./state-file.js").NpyArray} array
   * @returns {any} an ONNX Runtime tensor of a copy of its values
   */
  _tensor(array) {
    const data = /** @type {any} */ (array.data).slice();
    return new this.ort.Tensor(TENSOR_TYPE[array.dtype], data, array.shape);
  }

  /**
   * A small state tensor's values (always on the host).
   * @param {string} name
   * @returns {any}
   */
  _small(name) {
    return this.state[name].data;
  }

  /** @returns {Record<string, number>} the counters, by name (the graph's realm.counters) */
  get counters() {
    const data = this._small(COUNTERS_NAME);
    return Object.fromEntries(this.spec.counters.map((name, k) => [name, Number(data[k])]));
  }

  /** @returns {Record<string, boolean>} which optional values exist (the graph's realm.known) */
  get _known() {
    const data = this._small(KNOWN_NAME);
    return Object.fromEntries(this.spec.known.map((name, k) => [name, Boolean(data[k])]));
  }

  /** @returns {Record<string, number>} the watch figures' values (realm.watch) */
  get _figures() {
    const data = this._small(WATCH_NAME);
    return Object.fromEntries(this.spec.watch.map((name, k) => [name, Number(data[k])]));
  }

  /** @returns {WatchFigures} the recent stream's figures */
  get watch() {
    const known = this._known;
    const figures = this._figures;
    return {
      seen: Number(this._small(SEEN_NAME)[0]),
      updateRate: known[KNOWN_UPDATE_RATE] ? figures[FIGURE_UPDATE_RATE] : null,
      entropyEma: known[KNOWN_WATCH] ? figures[FIGURE_ENTROPY_EMA] : null,
      marginal: known[KNOWN_WATCH] ? new Float32Array(this._small(MARGINAL_NAME)) : null,
    };
  }

  /** @returns {Float32Array | null} S_div's EMA of the updated predictions (null before any) */
  get ema() {
    return this._known[KNOWN_EMA] ? new Float32Array(this._small(EMA_NAME)) : null;
  }

  /** @returns {number | null} SAR's loss EMA since the last reset */
  get lossEma() {
    return this._known[KNOWN_LOSS_EMA] ? this._figures[FIGURE_LOSS_EMA] : null;
  }

  /**
   * One scalar of realm.params where it is on the host (null on the GPU, or not learned).
   * @param {string} name
   * @returns {number | null}
   */
  _scalar(name) {
    const slot = this.layout.find((s) => s.name === name);
    const tensor = this.state[PARAMS_NAME];
    if (!slot || tensor.location === "gpu-buffer") return null;
    return tensor.data[slot.offset];
  }

  /** @returns {number | null} current α (REALM; null where the state is on the GPU) */
  get alpha() {
    return this._scalar(ALPHA_NAME);
  }

  /** @returns {number | null} current λ (REALM; null where the state is on the GPU) */
  get lambda() {
    return this._scalar(LAMBDA_NAME);
  }

  /**
   * Every state tensor's values on the host (downloaded where the session keeps them on a GPU).
   * @returns {Promise<Record<string, any>>}
   */
  async hostState() {
    /** @type {Record<string, any>} */
    const out = {};
    for (const [name, tensor] of Object.entries(this.state)) {
      out[name] = typeof tensor.getData === "function" && tensor.location === "gpu-buffer" ? await tensor.getData() : tensor.data;
    }
    return out;
  }

  /**
   * ‖θ − θ0‖ / ‖θ0‖ over the adapted norm tensors (α, λ excluded): the figure an app watches.
   * @returns {Promise<number>}
   */
  async drift() {
    const params = (await this.hostState())[PARAMS_NAME];
    let moved = 0;
    let norm = 0;
    for (const slot of this.layout) {
      if (slot.name === ALPHA_NAME || slot.name === LAMBDA_NAME) continue;
      const end = slot.offset + slot.shape.reduce((a, b) => a * b, 1);
      for (let i = slot.offset; i < end; i++) {
        moved += (params[i] - this.source[i]) ** 2;
        norm += this.source[i] ** 2;
      }
    }
    return norm > 0 ? Math.sqrt(moved) / Math.sqrt(norm) : 0;
  }

  // ---------------------------------------------------------------- the state file

  /**
   * The whole adaptation state as the SDK's state file: exactly the graph's state tensors.
   * @returns {Promise<Uint8Array>}
   */
  async saveState() {
    const host = await this.hostState();
    /** @type {Map<string, import("./state-file.js").NpyArray>} */
    const arrays = new Map();
    for (const entry of this.spec.state) {
      const tensor = this.state[entry.input];
      const dtype = /** @type {"<f4" | "<i8" | "|b1" | "|u1"} */ (NPY_TYPE[/** @type {"float32"} */ (tensor.type)]);
      arrays.set(entry.input, { dtype, shape: [...tensor.dims], data: host[entry.input].slice() });
    }
    const config = this.manifest.config;
    const header = {
      method: config.method,
      num_classes: this.classes,
      trainable: this.trainableNames,
      layout: this.layout.map((s) => ({ name: s.name, shape: s.shape })),
      config,
      artifacts: this.artifactsId,
    };
    return writeState(header, arrays);
  }

  /**
   * Load a state file written by {@link saveState}, `RealmRuntime.save` or the SDK.
   * Everything is checked first: a state that does not fit these artifacts throws and
   * changes nothing.
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
    const extra = [...arrays.keys()].filter((name) => !this.initial.has(name));
    if (extra.length) throw new StateFileError(`arrays ${extra.join(", ")} are not adapt-graph state tensors`);
    /** @type {Record<string, any>} */
    const next = {};
    for (const [name, want] of this.initial) {
      if (name === SETTINGS_NAME) {  // this app's settings, whatever the saving side ran
        next[name] = this._tensor(want);
        continue;
      }
      const got = arrays.get(name);
      if (!got || got.dtype !== want.dtype || JSON.stringify(got.shape) !== JSON.stringify(want.shape)) {
        throw new StateFileError(`${name}: missing, or not ${want.dtype} of shape (${want.shape.join(", ")})`);
      }
      if (got.dtype === "<f4" && !got.data.every(Number.isFinite)) throw new StateFileError(`${name}: non-finite values`);
      if (got.dtype === "<i8" && got.data.some((/** @type {bigint} */ v) => v < 0n)) throw new StateFileError(`${name}: negative counts`);
      next[name] = this._tensor(got);
    }
    this._replace(next);
  }
}
