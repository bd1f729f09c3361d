// @ts-check
/**
 * The artifact manifest `realm.json`, checked before anything runs: the same checks and the
 * same messages as the Python runtime (realm_runtime/_manifest.py).
 * @module manifest
 */

export const MANIFEST_NAME = "realm.json";
export const ARTIFACT_FORMAT = "realm-tta/artifacts";
export const ARTIFACT_VERSION = 1;

/** A manifest or an artifact file does not fit. */
export class ArtifactError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "ArtifactError";
  }
}

/**
 * @typedef {object} PortableSlot
 * @property {string} name trainable tensor (the SDK's name, or realm.alpha / realm.lambda)
 * @property {number} offset first element in the flat vector realm.params
 * @property {number[]} shape the tensor's shape ([] for α and λ)
 */

/**
 * @typedef {object} PortableSection
 * @property {string} step_model forward, loss, gradients and the update in one graph
 * @property {string} forward_model input + realm.params → logits
 * @property {string} source_params realm.params of the exported model (.npy)
 * @property {string} decide_model S_div / EATA decision graph
 * @property {number} size length of realm.params
 * @property {PortableSlot[]} layout where each trainable tensor lies in realm.params
 */

/**
 * @typedef {object} Manifest
 * @property {string} format always ARTIFACT_FORMAT
 * @property {number} version ARTIFACT_VERSION of the writer
 * @property {{name: string, shape: (number|string)[], dtype: string}} input model input
 * @property {string} logits_name graph output holding the logits
 * @property {number} num_classes width of the logits
 * @property {Record<string, any>} config RealmConfig of the export
 * @property {Record<string, number[]>} trainable trainable tensor name -> shape
 * @property {Record<string, string>} files file name -> SHA-256 hex digest
 * @property {Record<string, any>} versions library versions of the export
 * @property {PortableSection} portable the portable step graph's files and layout
 * @property {Record<string, any>} [model] model name/class, source
 */

/**
 * Parse and check a manifest's fields.
 * @param {unknown} data the parsed JSON
 * @param {string} source where it came from, for messages
 * @returns {Manifest}
 */
export function parseManifest(data, source = MANIFEST_NAME) {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new ArtifactError(`${source} does not hold a JSON object`);
  }
  const d = /** @type {Record<string, any>} */ (data);
  if (d.format !== ARTIFACT_FORMAT) {
    throw new ArtifactError(
      `${source}: format ${JSON.stringify(d.format)} is not '${ARTIFACT_FORMAT}': ` +
        "not a realm-tta artifact directory",
    );
  }
  if (d.version !== ARTIFACT_VERSION) {
    throw new ArtifactError(
      `${source}: artifact format version ${JSON.stringify(d.version)} is not supported ` +
        `(this client reads version ${ARTIFACT_VERSION}); re-export the model`,
    );
  }
  const required = ["input", "logits_name", "num_classes", "config", "trainable", "files"];
  const missing = required.filter((k) => !(k in d));
  if (missing.length) {
    throw new ArtifactError(`${source}: missing fields ${JSON.stringify(missing)}`);
  }
  return checkPortable(d, source);
}

/**
 * @param {Record<string, any>} d
 * @param {string} source
 * @returns {Manifest}
 */
function checkPortable(d, source) {
  const portable = d.portable;
  if (!portable || typeof portable !== "object" || !portable.step_model) {
    const why = portable?.error ? `: ${portable.error}` : "";
    throw new ArtifactError(`${source}: no portable step graph${why}; re-export with a current realm-tta`);
  }
  if (!portable.decide_model) {
    throw new ArtifactError(`${source}: no decision graph for JavaScript clients (exported with --no-web); re-export`);
  }
  const layout = /** @type {PortableSlot[]} */ (portable.layout ?? []);
  let end = 0;
  for (const slot of layout) {
    const size = slot.shape.reduce((a, b) => a * b, 1);
    if (slot.offset !== end) throw new ArtifactError(`${source}: portable.layout is not contiguous at ${slot.name}`);
    end += size;
  }
  if (end !== portable.size) {
    throw new ArtifactError(`${source}: portable.layout covers ${end} values, portable.size is ${portable.size}`);
  }
  for (const file of [portable.step_model, portable.forward_model, portable.source_params, portable.decide_model]) {
    if (!(file in d.files)) {
      throw new ArtifactError(`${source}: ${file} is not listed among the checksummed files`);
    }
  }
  return /** @type {Manifest} */ (d);
}

/**
 * Lower-case hex SHA-256 of bytes (WebCrypto; available on https and localhost pages).
 * @param {Uint8Array} bytes
 * @returns {Promise<string>}
 */
export async function sha256Hex(bytes) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", /** @type {Uint8Array<ArrayBuffer>} */ (bytes));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Check one file against the manifest's checksum.
 * @param {Manifest} manifest
 * @param {string} name file name relative to the artifact directory
 * @param {Uint8Array | null} bytes its contents, or null when it could not be fetched
 * @param {string} where the artifact directory, for messages
 * @returns {Promise<void>}
 */
export async function verifyFile(manifest, name, bytes, where) {
  const expected = manifest.files[name];
  if (expected === undefined) {
    throw new ArtifactError(`${where}/${name}: not listed in ${MANIFEST_NAME}`);
  }
  if (bytes === null) {
    throw new ArtifactError(`${where}/${name}: listed in ${MANIFEST_NAME} but missing`);
  }
  const actual = await sha256Hex(bytes);
  if (actual !== expected) {
    throw new ArtifactError(
      `${where}/${name}: SHA-256 ${actual.slice(0, 16)}… does not match the manifest's ` +
        `${expected.slice(0, 16)}… (the file was modified or truncated after export)`,
    );
  }
}
