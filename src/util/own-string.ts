/**
 * A flat copy of a string that does not keep the string it was cut from alive. V8 makes a slice
 * of 13 or more characters a view of its parent (a base name of a whole path, the hex of a
 * `sha256:<hex>` digest), and a string joined from parts a tree of them: kept as a map key or in a
 * node, the view keeps the parent too (~54-120 B more per key). toLowerCase() of a lowercase
 * string is a fresh flat copy (~90 ns; a Buffer round trip takes ~500); a string with capitals
 * keeps its view (it would come back changed).
 */
export function ownString(s: string): string {
  const copy = s.toLowerCase();
  return copy === s ? copy : s;
}
