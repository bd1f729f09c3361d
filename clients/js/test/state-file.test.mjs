// Unit tests of the state-file reader/writer (node --test); Python reads and writes the same
// files in tests/clients/test_state_file_js.py.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  STATE_FORMAT,
  STATE_HEADER_MEMBER,
  STATE_VERSION,
  PARAMS_NAME,
  VELOCITY_NAME,
  EMA_NAME,
} from "../contract.js";
import {
  StateFileError,
  crc32,
  float32Array,
  formatNpy,
  parseNpy,
  readState,
  readZip,
  writeState,
} from "../state-file.js";

const HEADER = { method: "realm", num_classes: 3, trainable: ["w"], counters: { samples: 2 } };

function sample() {
  return new Map([
    [PARAMS_NAME, float32Array([1.5, -2, 3.25], [3])],
    [VELOCITY_NAME, float32Array([0, 0.125, -1], [3])],
    [EMA_NAME, float32Array([0.5, 0.25, 0.25], [3])],
    ["grid", float32Array([1, 2, 3, 4, 5, 6], [2, 3])],
  ]);
}

test("crc32 is zip's (the check value of '123456789')", () => {
  assert.equal(crc32(new TextEncoder().encode("123456789")), 0xcbf43926);
});

test("npy headers are numpy's: 64-byte aligned, scalar and 1-d shapes", () => {
  for (const [shape, text] of [
    [[], "()"],
    [[3], "(3,)"],
    [[2, 3], "(2, 3)"],
  ]) {
    const count = shape.reduce((a, b) => a * b, 1);
    const bytes = formatNpy(float32Array(new Array(count).fill(1), shape));
    const headerEnd = 10 + new DataView(bytes.buffer).getUint16(8, true);
    assert.equal(headerEnd % 64, 0);
    assert.ok(new TextDecoder().decode(bytes.subarray(10, headerEnd)).includes(`'shape': ${text}`));
    assert.deepEqual(parseNpy(bytes, "x").shape, shape);
  }
});

test("a state survives writeState → readState exactly", () => {
  const state = readState(writeState(HEADER, sample()));
  assert.equal(state.header.format, STATE_FORMAT);
  assert.equal(state.header.version, STATE_VERSION);
  assert.deepEqual(state.header.counters, { samples: 2 });
  for (const [name, array] of sample()) {
    const got = state.arrays.get(name);
    assert.ok(got, name);
    assert.deepEqual(got.shape, array.shape);
    assert.deepEqual(Array.from(got.data), Array.from(array.data));
  }
  assert.equal(state.arrays.has(STATE_HEADER_MEMBER), false);
});

test("a state file of another version is refused, with the fix", () => {
  const old = writeState({ ...HEADER, version: 2 }, sample());
  assert.throws(
    () => readState(old),
    (err) =>
      err instanceof StateFileError &&
      err.message.includes(`state format version 2 is not this client's (${STATE_VERSION}): save the state with this realm-tta, or start from the export`),
  );
});

test("damaged files are refused with the reason", () => {
  const good = writeState(HEADER, sample());
  assert.throws(() => readState(good.subarray(0, good.length - 30)), StateFileError);
  assert.throws(() => readState(new Uint8Array(100)), /end-of-central-directory/);
  const payload = new Uint8Array(Float32Array.from([1.5, -2, 3.25]).buffer);
  const at0 = Buffer.from(good).indexOf(Buffer.from(payload)); // realm.params' values
  assert.ok(at0 > 0);
  const flipped = good.slice();
  flipped[at0 + 5] ^= 0xff;
  assert.throws(() => readState(flipped), /realm\.params\.npy: CRC-32 mismatch/);
  const foreign = writeState({}, sample());
  const text = new TextDecoder("latin1").decode(foreign);
  const at = text.indexOf(STATE_FORMAT);
  const other = foreign.slice();
  other[at] = "x".charCodeAt(0); // the format string, with its CRC now wrong too
  assert.throws(() => readState(other), StateFileError);
  assert.throws(() => readZip(new Uint8Array(0)), StateFileError);
});

test("only float32 and uint8 arrays, C order", () => {
  const bytes = formatNpy(float32Array([1, 2], [2]));
  const text = new TextDecoder("latin1").decode(bytes).replace("<f4", "<f8");
  assert.throws(() => parseNpy(new Uint8Array([...text].map((c) => c.charCodeAt(0))), "m"), /dtype <f8/);
  assert.throws(() => formatNpy(float32Array([1, 2, 3], [2])), /has 3 values/);
});
