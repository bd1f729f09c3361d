// @ts-check
/**
 * Ed25519 signatures of artifact directories (`realm.sig` beside `realm.json`), checked with
 * WebCrypto by the rules of the Python runtime (realm_runtime/_signing.py).
 * @module signing
 */

import {
  MANIFEST_NAME,
  MAX_SIGNATURE_BYTES,
  SIGNATURE_ALGORITHM,
  SIGNATURE_FORMAT,
  SIGNATURE_NAME,
  SIGNATURE_VERSION,
} from "./contract.js";
import { ArtifactError } from "./manifest.js";

/**
 * @typedef {object} SignatureCheck what was found about realm.sig
 * @property {string | null} key the signing public key (base64), null when unsigned
 * @property {boolean} verified the signature was checked with WebCrypto and holds
 * @property {string} note for the page: what was checked, or why not
 */

/**
 * Check realm.sig (Ed25519 over the manifest's bytes) before anything in the manifest is used:
 * the same rules as the Python runtime. With trustedKeys, the artifacts must be signed by one
 * of them; without, a signature present must verify against the key it names. Where WebCrypto
 * has no Ed25519, a required signature is an error and an optional one is reported unchecked.
 * @param {Uint8Array} manifest the bytes of realm.json
 * @param {Uint8Array | null} signature the bytes of realm.sig, null when absent
 * @param {string[] | null} trustedKeys base64 Ed25519 public keys (realm keygen's .pub), or null
 * @param {string} where the artifact directory, for messages
 * @returns {Promise<SignatureCheck>}
 */
export async function checkSignature(manifest, signature, trustedKeys, where) {
  const path = `${where}/${SIGNATURE_NAME}`;
  if (trustedKeys !== null && trustedKeys.length === 0) {
    throw new ArtifactError("trustedKeys is empty: pass null to accept unsigned artifacts");
  }
  if (signature === null) {
    if (trustedKeys) {
      throw new ArtifactError(`${path} not found: these artifacts are unsigned, and this client trusts signed ones only (realm export --sign KEY)`);
    }
    return { key: null, verified: false, note: "unsigned" };
  }
  /** @type {Record<string, any>} */
  let record;
  try {
    if (signature.length > MAX_SIGNATURE_BYTES) throw new Error(`${signature.length} bytes`);
    record = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(signature));
    if (typeof record !== "object" || record === null) throw new Error("not a JSON object");
  } catch (err) {
    throw new ArtifactError(`${path} is not a signature file (damaged?): ${err}`);
  }
  if (
    record.format !== SIGNATURE_FORMAT ||
    record.version !== SIGNATURE_VERSION ||
    record.algorithm !== SIGNATURE_ALGORITHM ||
    record.signed !== MANIFEST_NAME
  ) {
    throw new ArtifactError(`${path}: not an ${SIGNATURE_ALGORITHM} signature of ${MANIFEST_NAME} in realm-tta's format`);
  }
  /** @param {unknown} text @param {number} length @param {string} what */
  const bytesOf = (text, length, what) => {
    let out;
    try {
      out = Uint8Array.from(atob(String(text)), (c) => c.charCodeAt(0));
    } catch {
      throw new ArtifactError(`${path}: damaged (its ${what} is not base64)`);
    }
    if (out.length !== length) throw new ArtifactError(`${path}: damaged (its ${what} has ${out.length} bytes, not ${length})`);
    return out;
  };
  const key = bytesOf(record.public_key, 32, "public key");
  const sig = bytesOf(record.signature, 64, "signature");
  const keyText = btoa(String.fromCharCode(...key));
  if (trustedKeys && !trustedKeys.map((k) => k.trim()).includes(keyText)) {
    throw new ArtifactError(`${path}: signed by key ${keyText.slice(0, 12)}…, which is not among the trusted keys`);
  }
  let imported;
  try {
    imported = await globalThis.crypto.subtle.importKey("raw", key, { name: SIGNATURE_ALGORITHM }, false, ["verify"]);
  } catch (err) {
    if (trustedKeys) {
      throw new ArtifactError(`${path}: this browser's WebCrypto has no ${SIGNATURE_ALGORITHM} (${err}), so the signature the trusted keys require cannot be checked`);
    }
    return { key: keyText, verified: false, note: `signed, not checked: no ${SIGNATURE_ALGORITHM} in this browser's WebCrypto` };
  }
  const ok = await globalThis.crypto.subtle.verify({ name: SIGNATURE_ALGORITHM }, imported, sig, /** @type {Uint8Array<ArrayBuffer>} */ (manifest));
  if (!ok) {
    throw new ArtifactError(`${path}: the signature does not verify for ${MANIFEST_NAME}'s bytes: the manifest (or the signature) was changed after signing`);
  }
  return { key: keyText, verified: true, note: `signature verified (key ${keyText.slice(0, 12)}…${trustedKeys ? ", trusted" : ""})` };
}
