/** Injected time: every expiry, idle check and throttle window reads this, so tests never sleep. */
export type Clock = () => number

export const systemClock: Clock = () => Date.now()

export const iso = (ms: number): string => new Date(ms).toISOString()
