/**
 * `work`'s outcome, or a rejection with what `late()` returns once `ms` have passed first. `late`
 * runs only when the deadline wins (it may also end what `work` was waiting for); the timer is
 * cleared either way, so nothing is left to fire.
 */
export async function beforeDeadline<T>(work: Promise<T>, ms: number, late: () => unknown): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), ms)
  })
  try {
    return await Promise.race([work, expired])
  } finally {
    clearTimeout(timer)
  }
}
