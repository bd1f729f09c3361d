// @ts-check
/**
 * The one adapt graph from JavaScript (onnxruntime-web in a page, onnxruntime-node): a client
 * that knows only the manifest's "adapt" section (docs/adapt.md). Per sample it runs the
 * graph and keeps each state's next value; the decision, the step, the guardrails and the
 * counters are the graph's. The state stays in the session's tensors between calls.
 */

import {
  ArtifactError,
  MANIFEST_NAME,
  SIGNATURE_NAME,
  checkSignature,
  readManifest,
  verifyFile,
} from "./manifest.js";
import { parseNpy } from "./state-file.js";

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
 */

/** The large float32 state, kept on the GPU between calls where asked (WebGPU). */
const FLOAT_STATE = ["realm.params", "realm.velocity"];

/** Tensor types of the .npy dtypes an initial state holds. */
const TENSOR_TYPE = { "<f4": "float32", "<i8": "int64", "|b1": "bool", "|u1": "uint8" };

export class AdaptClient {
  /**
   * Check the manifest, its signature and every file the graph reads, then open the graph.
   * @param {any} ort an ONNX Runtime JavaScript module
   * @param {ReadFile} read reads an artifact file (fetch in a page, fs in Node)
   * @param {string} where the artifact directory, for messages
   * @param {{threads?: number, executionProviders?: any[], trustedKeys?: any,
   *   stateOnGpu?: boolean}} [options] stateOnGpu: keep the float32 state in GPU buffers
   *   between calls (WebGPU), downloaded only by {@link AdaptClient.read}
   * @returns {Promise<AdaptClient>}
   */
  static async load(ort, read, where, options = {}) {
    const raw = await read(MANIFEST_NAME);
    if (raw === null) {
      throw new ArtifactError(`${where}/${MANIFEST_NAME} not found: not an artifact directory written by realm export`);
    }
    await checkSignature(raw, await read(SIGNATURE_NAME), options.trustedKeys ?? null, where);
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
    const sessionOptions = { logSeverityLevel: 3, graphOptimizationLevel: "all" };
    if (options.threads) sessionOptions.intraOpNumThreads = options.threads;
    if (options.executionProviders) sessionOptions.executionProviders = options.executionProviders;
    const weights = manifest.portable.weights?.file;
    if (weights) {
      sessionOptions.externalData = [{ path: weights, data: await verified(weights) }];
    }
    if (options.stateOnGpu) {
      /** @type {Record<string, string>} */
      const where = {};
      for (const entry of spec.state) where[entry.output] = "cpu";
      for (const name of FLOAT_STATE) {
        const entry = spec.state.find((e) => e.input === name);
        if (entry) where[entry.output] = "gpu-buffer";
      }
      sessionOptions.preferredOutputLocation = where;
    }
    const session = await ort.InferenceSession.create(await verified(spec.file), sessionOptions);
    /** @type {Record<string, any>} */
    const state = {};
    for (const entry of spec.state) {
      const array = parseNpy(await verified(entry.initial), entry.initial);
      const type = TENSOR_TYPE[array.dtype];
      state[entry.input] = new ort.Tensor(type, array.data, array.shape);
    }
    return new AdaptClient(ort, manifest, session, state);
  }

  /**
   * Use {@link AdaptClient.load}.
   * @param {any} ort
   * @param {import("./manifest.js").Manifest} manifest
   * @param {any} session the adapt graph's InferenceSession
   * @param {Record<string, any>} state graph input name → its current tensor
   */
  constructor(ort, manifest, session, state) {
    this.ort = ort;
    this.manifest = manifest;
    this.spec = /** @type {import("./manifest.js").AdaptSection} */ (manifest.adapt);
    this.session = session;
    this.state = state;
    this.shape = manifest.input.shape.map((d) => (typeof d === "number" ? d : 1));
  }

  /**
   * One sample through the graph; the state moves on.
   * @param {Float32Array} sample the preprocessed input, (1, *input shape) in C order
   * @returns {Promise<AdaptStep>}
   */
  async adapt(sample) {
    const size = this.shape.reduce((a, b) => a * b, 1);
    if (!(sample instanceof Float32Array) || sample.length !== size) {
      throw new RangeError(`sample must be a Float32Array of ${size} values (shape ${JSON.stringify(this.shape)})`);
    }
    const feeds = { ...this.state, [this.spec.input]: new this.ort.Tensor("float32", sample, this.shape) };
    const out = await this.session.run(feeds);
    for (const entry of this.spec.state) this.state[entry.input] = out[entry.output];
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
    };
  }

  /**
   * The counters, by name (from the graph's realm.counters).
   * @returns {Promise<Record<string, number>>}
   */
  async counters() {
    const data = await this.read("realm.counters");
    /** @type {Record<string, number>} */
    const out = {};
    this.spec.counters.forEach((name, k) => {
      out[name] = Number(data[k]);
    });
    return out;
  }

  /**
   * A state tensor's values on the host (downloaded where the session keeps it on a GPU).
   * @param {string} name a state input, e.g. "realm.params"
   * @returns {Promise<any>}
   */
  async read(name) {
    const tensor = this.state[name];
    return typeof tensor.getData === "function" ? await tensor.getData() : tensor.data;
  }
}
