// @ts-check
/**
 * realm-tta's JavaScript client: the one adapt graph of an artifact directory on any ONNX
 * Runtime JavaScript binding (onnxruntime-web in a page, onnxruntime-node), the manifest and
 * signature checks before it, and the SDK's state file. Each module mirrors a Python one of
 * realm_runtime: adapt-client.js ↔ _runtime.py, manifest.js ↔ _manifest.py, signing.js ↔
 * _signing.py, state-file.js ↔ _checkpoint.py, contract.js ↔ _names.py (generated from it).
 * The client is handed the ONNX Runtime module, so it depends on no binding itself.
 * @module realm-tta-client
 */

export * from "./contract.js";
export { AdaptClient, checkSample } from "./adapt-client.js";
export {
  ArtifactError,
  adaptFiles,
  checkFormat,
  checkSeal,
  parseManifest,
  readManifest,
  sha256Hex,
  verifyFile,
} from "./manifest.js";
export { checkSignature } from "./signing.js";
export {
  StateFileError,
  crc32,
  float32Array,
  formatNpy,
  parseNpy,
  readState,
  readZip,
  writeState,
  writeZip,
} from "./state-file.js";
