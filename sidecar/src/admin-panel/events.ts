/** The admin panel's events (kernel/events.ts): the shared set of workflows changed by an admin. */
declare module '../kernel/events.js' {
  interface EventMap {
    workflow_published: { subject: string; filename: string }
    workflow_unshared: { filename: string }
  }
}
export {}
