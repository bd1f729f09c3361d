// @ts-check
/**
 * The SDK's adaptation-state file in JavaScript: read and write the `.npz` that
 * `RealmRuntime.save` and `RealmAdapter.save` write, so a state moves between Python, Node and
 * the browser (realm_runtime/_checkpoint.py is the reference).
 *
 * The file is numpy's `np.savez` layout: a zip archive whose members are stored, not
 * compressed, each a `.npy` array (format 1.0); the member `__header__.npy` holds the UTF-8
 * JSON header (format, version, method, counters, trainable names, config) as uint8. No
 * dependency: the zip and `.npy` framing are written out here, CRC-32 included.
 *
 * Every malformed file is refused with a `StateFileError` naming the problem, before any
 * array is allocated from a size the file declares.
 * @module state-file
 */

// The members are exactly the adapt graph's state tensors, under its input names.
import { STATE_FORMAT, STATE_HEADER_MEMBER, STATE_VERSION } from "./contract.js";

/** A state file that cannot be read, with what is wrong with it. */
export class StateFileError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "StateFileError";
  }
}

/**
 * @typedef {object} NpyArray one array of a state file
 * @property {"<f4" | "|u1" | "<i8" | "|b1"} dtype numpy's type string (the adapt graph's
 *   state: float32, int64 and bool; the header member: uint8)
 * @property {number[]} shape `[]` for a scalar
 * @property {any} data C order: a Float32Array, Uint8Array or BigInt64Array
 */

/**
 * @typedef {object} StateFile
 * @property {Record<string, any>} header the JSON header (format and version checked)
 * @property {Map<string, NpyArray>} arrays name → array, without the header member: the adapt
 *   graph's state tensors (`realm.params`, `realm.velocity`, ...) from version 3 on; before
 *   it `param/<name>`, `momentum/<name>`, `alpha`, `lam`, `alpha_momentum`, `lam_momentum`,
 *   `ema` and `watch/<figure>`
 */

// ------------------------------------------------------------------ CRC-32 (zip's)

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/**
 * @param {Uint8Array} bytes
 * @returns {number}
 */
export function crc32(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// ------------------------------------------------------------------ .npy

const NPY_MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
// float32 and uint8 (a state file's); int64 and bool (the adapt graph's initial state)
const ITEM_SIZE = { "<f4": 4, "|u1": 1, "<i8": 8, "|b1": 1 };

/**
 * @param {string} dtype
 * @returns {dtype is "<f4" | "|u1" | "<i8" | "|b1"}
 */
function knownDtype(dtype) {
  return dtype in ITEM_SIZE;
}

/**
 * One `.npy` member → array.
 * @param {Uint8Array} bytes
 * @param {string} name for messages
 * @returns {NpyArray}
 */
export function parseNpy(bytes, name) {
  if (bytes.length < 10 || NPY_MAGIC.some((b, i) => bytes[i] !== b)) {
    throw new StateFileError(`${name}: not a .npy array (no \\x93NUMPY magic)`);
  }
  const major = bytes[6];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  if (major < 1 || major > 3 || start + headerLength > bytes.length) {
    throw new StateFileError(`${name}: .npy version ${major} or header length is invalid`);
  }
  const text = new TextDecoder("latin1").decode(bytes.subarray(start, start + headerLength));
  const descr = /'descr':\s*'([^']+)'/.exec(text);
  const order = /'fortran_order':\s*(True|False)/.exec(text);
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(text);
  if (!descr || !order || !shapeText) {
    throw new StateFileError(`${name}: .npy header is not numpy's dict: ${text.trim()}`);
  }
  if (!knownDtype(descr[1])) {
    throw new StateFileError(`${name}: dtype ${descr[1]} (known: <f4, |u1, <i8, |b1)`);
  }
  if (order[1] === "True") throw new StateFileError(`${name}: Fortran order is not supported`);
  const shape = shapeText[1]
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      const n = Number(s);
      if (!Number.isSafeInteger(n) || n < 0) {
        throw new StateFileError(`${name}: shape entry ${s} is not a size`);
      }
      return n;
    });
  const count = shape.reduce((a, b) => a * b, 1);
  const dataStart = start + headerLength;
  const expected = count * ITEM_SIZE[descr[1]];
  if (bytes.length - dataStart !== expected) {
    throw new StateFileError(
      `${name}: shape (${shape.join(", ")}) needs ${expected} bytes, the member has ` +
        `${bytes.length - dataStart}`,
    );
  }
  const payload = bytes.slice(dataStart, dataStart + expected); // a copy, aligned
  const data =
    descr[1] === "<f4"
      ? new Float32Array(payload.buffer)
      : descr[1] === "<i8"
        ? new BigInt64Array(payload.buffer)
        : payload;
  return { dtype: descr[1], shape, data };
}

/**
 * Array → `.npy` bytes (format 1.0, header padded to 64 bytes as numpy writes it).
 * @param {NpyArray} array
 * @returns {Uint8Array}
 */
export function formatNpy(array) {
  const count = array.shape.reduce((a, b) => a * b, 1);
  if (array.data.length !== count) {
    throw new StateFileError(`array of shape (${array.shape}) has ${array.data.length} values`);
  }
  const dims = array.shape.length === 1 ? `${array.shape[0]},` : array.shape.join(", ");
  let dict = `{'descr': '${array.dtype}', 'fortran_order': False, 'shape': (${dims}), }`;
  const unpadded = 10 + dict.length + 1;
  dict += " ".repeat((64 - (unpadded % 64)) % 64) + "\n";
  const header = new TextEncoder().encode(dict);
  const data = new Uint8Array(array.data.buffer, array.data.byteOffset, array.data.byteLength);
  const out = new Uint8Array(10 + header.length + data.length);
  out.set(NPY_MAGIC, 0);
  out[6] = 1;
  out[7] = 0;
  new DataView(out.buffer).setUint16(8, header.length, true);
  out.set(header, 10);
  out.set(data, 10 + header.length);
  return out;
}

// ------------------------------------------------------------------ zip (stored members)

/**
 * The members of a zip archive whose members are stored (np.savez), by name.
 * @param {Uint8Array} bytes
 * @returns {Map<string, Uint8Array>}
 */
export function readZip(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // End of central directory: the last 22 bytes, or earlier when a comment follows.
  let eocd = -1;
  for (let i = bytes.length - 22; i >= Math.max(0, bytes.length - 22 - 65535); i--) {
    if (view.getUint32(i, true) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new StateFileError("not a zip archive (no end-of-central-directory record)");
  const entries = view.getUint16(eocd + 10, true);
  const dirSize = view.getUint32(eocd + 12, true);
  let at = view.getUint32(eocd + 16, true);
  if (at + dirSize > eocd) throw new StateFileError("zip central directory lies outside the file");
  /** @type {Map<string, Uint8Array>} */
  const members = new Map();
  for (let k = 0; k < entries; k++) {
    if (at + 46 > eocd || view.getUint32(at, true) !== 0x02014b50) {
      throw new StateFileError(`zip central directory entry ${k} is damaged`);
    }
    const method = view.getUint16(at + 10, true);
    const crc = view.getUint32(at + 16, true);
    const packed = view.getUint32(at + 20, true);
    const size = view.getUint32(at + 24, true);
    const nameLength = view.getUint16(at + 28, true);
    const extraLength = view.getUint16(at + 30, true);
    const commentLength = view.getUint16(at + 32, true);
    const local = view.getUint32(at + 42, true);
    const name = new TextDecoder().decode(bytes.subarray(at + 46, at + 46 + nameLength));
    at += 46 + nameLength + extraLength + commentLength;
    if (method !== 0 || packed !== size) {
      throw new StateFileError(`${name}: compressed zip member (a state file stores them)`);
    }
    if (local + 30 > bytes.length || view.getUint32(local, true) !== 0x04034b50) {
      throw new StateFileError(`${name}: zip local header is damaged`);
    }
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    if (start + size > bytes.length) {
      throw new StateFileError(`${name}: declares ${size} bytes, the file ends before`);
    }
    const data = bytes.subarray(start, start + size);
    if (crc32(data) !== crc) throw new StateFileError(`${name}: CRC-32 mismatch (damaged)`);
    members.set(name, data);
  }
  return members;
}

/**
 * Members → a zip archive, stored (no compression), as np.savez writes it.
 * @param {Map<string, Uint8Array>} members
 * @returns {Uint8Array}
 */
export function writeZip(members) {
  const encoder = new TextEncoder();
  /** @type {Uint8Array[]} */
  const chunks = [];
  /** @type {Uint8Array[]} */
  const directory = [];
  let offset = 0;
  for (const [name, data] of members) {
    const nameBytes = encoder.encode(name);
    const crc = crc32(data);
    const local = new Uint8Array(30 + nameBytes.length);
    const lv = new DataView(local.buffer);
    lv.setUint32(0, 0x04034b50, true);
    lv.setUint16(4, 20, true); // version needed: 2.0
    lv.setUint32(14, crc, true);
    lv.setUint32(18, data.length, true);
    lv.setUint32(22, data.length, true);
    lv.setUint16(26, nameBytes.length, true);
    local.set(nameBytes, 30);
    const entry = new Uint8Array(46 + nameBytes.length);
    const cv = new DataView(entry.buffer);
    cv.setUint32(0, 0x02014b50, true);
    cv.setUint16(4, 20, true);
    cv.setUint16(6, 20, true);
    cv.setUint32(16, crc, true);
    cv.setUint32(20, data.length, true);
    cv.setUint32(24, data.length, true);
    cv.setUint16(28, nameBytes.length, true);
    cv.setUint32(42, offset, true);
    entry.set(nameBytes, 46);
    chunks.push(local, data);
    directory.push(entry);
    offset += local.length + data.length;
  }
  const dirSize = directory.reduce((n, e) => n + e.length, 0);
  const end = new Uint8Array(22);
  const ev = new DataView(end.buffer);
  ev.setUint32(0, 0x06054b50, true);
  ev.setUint16(8, members.size, true);
  ev.setUint16(10, members.size, true);
  ev.setUint32(12, dirSize, true);
  ev.setUint32(16, offset, true);
  const out = new Uint8Array(offset + dirSize + 22);
  let at = 0;
  for (const part of [...chunks, ...directory, end]) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

// ------------------------------------------------------------------ the state file

/**
 * Read a state file written by the SDK, `RealmRuntime` or {@link writeState}.
 * @param {Uint8Array} bytes the file's content
 * @returns {StateFile}
 */
export function readState(bytes) {
  try {
    return readStateUnchecked(bytes);
  } catch (error) {
    if (error instanceof StateFileError) throw error;
    // A damaged file can still trip a DataView bound or a decoder: to a caller it is the same.
    throw new StateFileError(`damaged state file (${error})`);
  }
}

/**
 * @param {Uint8Array} bytes
 * @returns {StateFile}
 */
function readStateUnchecked(bytes) {
  const members = readZip(bytes);
  /** @type {Map<string, NpyArray>} */
  const arrays = new Map();
  for (const [file, data] of members) {
    const name = file.endsWith(".npy") ? file.slice(0, -4) : file;
    arrays.set(name, parseNpy(data, file));
  }
  const raw = arrays.get(STATE_HEADER_MEMBER);
  if (!raw || raw.dtype !== "|u1") {
    throw new StateFileError(`no ${STATE_HEADER_MEMBER} member: not a realm-tta state file`);
  }
  arrays.delete(STATE_HEADER_MEMBER);
  /** @type {Record<string, any>} */
  let header;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw.data));
  } catch (error) {
    throw new StateFileError(`the header is not valid UTF-8 JSON: ${error}`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    throw new StateFileError("the header is not a JSON object");
  }
  if (header.format !== STATE_FORMAT) {
    throw new StateFileError(`format ${JSON.stringify(header.format)}, expected ${STATE_FORMAT}`);
  }
  if (header.version !== STATE_VERSION) {
    throw new StateFileError(
      `state format version ${JSON.stringify(header.version)} is not this client's (${STATE_VERSION}): save the state with this realm-tta, or start from the export`,
    );
  }
  return { header, arrays };
}

/**
 * Write a state file the SDK and `RealmRuntime` restore.
 * @param {Record<string, any>} header method, num_classes, trainable, counters, config
 *   (`format` and `version` are added)
 * @param {Map<string, NpyArray>} arrays name → array, as {@link StateFile}
 * @returns {Uint8Array}
 */
export function writeState(header, arrays) {
  if (arrays.has(STATE_HEADER_MEMBER)) throw new StateFileError(`${STATE_HEADER_MEMBER} is reserved`);
  const full = { format: STATE_FORMAT, version: STATE_VERSION, ...header };
  /** @type {Map<string, Uint8Array>} */
  const members = new Map();
  for (const [name, array] of arrays) members.set(`${name}.npy`, formatNpy(array));
  const json = new TextEncoder().encode(JSON.stringify(full));
  members.set(`${STATE_HEADER_MEMBER}.npy`, formatNpy({ dtype: "|u1", shape: [json.length], data: json }));
  return writeZip(members);
}

/**
 * A float32 array for {@link writeState}.
 * @param {ArrayLike<number>} values
 * @param {number[]} shape `[]` for a scalar
 * @returns {NpyArray}
 */
export function float32Array(values, shape) {
  return { dtype: "<f4", shape, data: Float32Array.from(values) };
}
