// @ts-check
/**
 * The artifact manifest `realm.json`, checked before anything runs: the same checks and the
 * same messages as the Python runtime (realm_runtime/_manifest.py), the manifest's seal
 * included (its `manifest_sha256` is the SHA-256 of its own bytes with that value as zeros).
 * @module manifest
 */

import {
  ADAPT_SETTINGS,
  ARTIFACT_FORMAT,
  ARTIFACT_VERSION,
  DIGEST_KEY,
  MANIFEST_NAME,
  MANIFEST_REQUIRED,
  SETTINGS_NAME,
} from "./contract.js";

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
 * @property {number} size length of realm.params
 * @property {PortableSlot[]} layout where each trainable tensor lies in realm.params
 * @property {{file: string}} [weights] the step and forward graphs' shared external data (weights.bin)
 */

/**
 * @typedef {object} AdaptState one state tensor of the adapt graph
 * @property {string} input the graph input
 * @property {string} output the graph output holding its next value
 * @property {string} initial the .npy file of its initial value
 */

/**
 * @typedef {object} AdaptSection the manifest's "adapt": all a client of the one graph needs
 * @property {string} file the graph
 * @property {string} input the sample input
 * @property {string} logits the logits output
 * @property {string} updated bool output: the step was applied
 * @property {string} selected bool output: the sample passed the filters
 * @property {string} reason int64 output: an index into reasons
 * @property {string[]} reasons the reason names
 * @property {string} loss float output: the step's loss where selected
 * @property {string[]} counters the order of realm.counters
 * @property {string[]} watch the order of realm.watch
 * @property {string[]} known the order of realm.known
 * @property {AdaptState[]} state the state tensors
 * @property {string[]} settings the slots of the realm.settings state: exactly ADAPT_SETTINGS (SPEC §11)
 * @property {string} [error] why there is no adapt graph
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
 * @property {AdaptSection} [adapt] the one adapt graph (docs/adapt.md), where it was written
 * @property {string} manifest_sha256 the manifest's seal: names these artifacts
 */

/**
 * The manifest's format and version, checked first (an old directory is told to re-export).
 * @param {unknown} data the parsed JSON
 * @param {string} source where it came from, for messages
 * @returns {Record<string, any>}
 */
export function checkFormat(data, source = MANIFEST_NAME) {
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
  return d;
}

/**
 * @param {Uint8Array} haystack
 * @param {Uint8Array} needle
 * @returns {number[]} every offset where needle starts
 */
function findAll(haystack, needle) {
  const found = [];
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    found.push(i);
  }
  return found;
}

/**
 * Check that the manifest's bytes hash to its own `manifest_sha256` (the exporter wrote the
 * file with that value as 64 zeros, hashed it, and put the digest in). Works on the bytes, as
 * the Python runtime does: any change to any byte of the file is refused.
 * @param {Uint8Array} raw the bytes of realm.json
 * @param {Record<string, any>} data the same, parsed
 * @param {string} source where it came from, for messages
 * @returns {Promise<string>} the digest
 */
export async function checkSeal(raw, data, source = MANIFEST_NAME) {
  const digest = data[DIGEST_KEY];
  if (typeof digest !== "string" || !/^[0-9a-f]{64}$/.test(digest)) {
    throw new ArtifactError(`${source}: no valid ${DIGEST_KEY} (the manifest's digest of itself): edited, or not written by realm export`);
  }
  const field = new TextEncoder().encode(`"${DIGEST_KEY}": "${digest}"`);
  const at = findAll(raw, field);
  if (at.length !== 1) {
    throw new ArtifactError(`${source}: ${DIGEST_KEY} must appear exactly once, as the exporter wrote it`);
  }
  const unsealed = new Uint8Array(raw);
  unsealed.fill(0x30, at[0] + field.length - 65, at[0] + field.length - 1); // the 64 hex digits → "0"
  const actual = await sha256Hex(unsealed);
  if (actual !== digest) {
    throw new ArtifactError(
      `${source}: its bytes do not hash to its own ${DIGEST_KEY} (${actual.slice(0, 16)}… vs ${digest.slice(0, 16)}…): ` +
        "the manifest was modified or damaged after export",
    );
  }
  return digest;
}

/**
 * Parse and check a manifest's fields.
 * @param {unknown} data the parsed JSON
 * @param {string} source where it came from, for messages
 * @returns {Manifest}
 */
export function parseManifest(data, source = MANIFEST_NAME) {
  const d = checkFormat(data, source);
  const missing = MANIFEST_REQUIRED.filter((k) => !(k in d));
  if (missing.length) {
    throw new ArtifactError(`${source}: missing fields ${JSON.stringify(missing)}: not a manifest of this realm-tta's export; re-export the model`);
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
  if (portable.weights !== undefined && typeof portable.weights?.file !== "string") {
    throw new ArtifactError(`${source}: portable.weights has no file name`);
  }
  checkAdapt(d.adapt, source);
  for (const file of adaptFiles(d)) {
    if (!(file in d.files)) {
      throw new ArtifactError(`${source}: ${file} is not listed among the checksummed files`);
    }
  }
  return /** @type {Manifest} */ (d);
}

/**
 * The adapt section, where it names a graph: this version's settings, fed as state (the
 * Python runtime's _check_adapt, its sentences).
 * @param {Record<string, any> | undefined} adapt
 * @param {string} source
 */
function checkAdapt(adapt, source) {
  if (!adapt || typeof adapt !== "object" || !adapt.file) return;
  const slots = adapt.settings;
  const inputs = Array.isArray(adapt.state) ? adapt.state.map((/** @type {any} */ e) => e?.input) : [];
  const where = "adapt.settings";
  let wrong;
  if (!Array.isArray(slots)) {
    wrong = `${where} is missing or not a list`;
  } else if (JSON.stringify(slots) !== JSON.stringify(ADAPT_SETTINGS)) {
    const lacks = ADAPT_SETTINGS.filter((name) => !slots.includes(name));
    const unknown = slots.filter((name) => !ADAPT_SETTINGS.includes(name));
    wrong = lacks.length || unknown.length
      ? `${where} lacks ${JSON.stringify(lacks)} and has ${JSON.stringify(unknown)}`
      : `${where} lists the settings in another order`;
  } else if (!inputs.includes(SETTINGS_NAME)) {
    wrong = `${SETTINGS_NAME} is not among its state inputs`;
  } else {
    return;
  }
  throw new ArtifactError(`${source}: the adapt graph is not this realm-tta's (${wrong}); re-export the model`);
}

/**
 * The files a client of the one adapt graph reads: the graph, its weights and the initial
 * value of each state tensor (none where the export wrote no adapt graph).
 * @param {Record<string, any>} d the manifest
 * @returns {string[]}
 */
export function adaptFiles(d) {
  const adapt = d.adapt;
  if (!adapt?.file) return [];
  const weights = d.portable.weights?.file;
  return [adapt.file, ...(weights ? [weights] : []), ...(adapt.state ?? []).map((/** @type {any} */ e) => e.initial)];
}

/**
 * Read manifest bytes as the Python runtime's parse_manifest does: JSON, format and version,
 * the seal, the fields. Every problem is an ArtifactError naming the file.
 * @param {Uint8Array} raw the bytes of realm.json
 * @param {string} source where they came from, for messages
 * @returns {Promise<Manifest>}
 */
export async function readManifest(raw, source = MANIFEST_NAME) {
  let data;
  try {
    data = JSON.parse(new TextDecoder().decode(raw));
  } catch (err) {
    throw new ArtifactError(`${source} is not valid JSON (truncated or edited?): ${err}`);
  }
  await checkSeal(raw, checkFormat(data, source), source);
  return parseManifest(data, source);
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
