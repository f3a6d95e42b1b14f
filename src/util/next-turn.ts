/**
 * Run tasks at the start of the next turn of the event loop, all in one `setImmediate`: for memory
 * handed to a caller that copies it within the current turn (a transient read's answer, a view of
 * a chunk leaving the memory LRU), released only once that turn is over. One timer for however
 * many buffers a turn lets go of.
 */
let due: Array<() => void> = [];

export function atNextTurn(task: () => void): void {
  if (due.length === 0) {
    setImmediate(() => {
      const tasks = due;
      due = [];
      for (const t of tasks) t();
    });
  }
  due.push(task);
}
