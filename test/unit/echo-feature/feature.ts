/**
 * A feature made for the composition test (feature-composition.test.ts): one folder, added to the
 * sidecar by one line. It brings an owned route (`GET /authsvc/api/echo`, any signed-in caller)
 * and a host route with a behaviour (`GET /echo_host`, `can_access_api`) whose filter replaces the
 * host's answer with who asked, from a typed step state kept in the sidecar.
 */
import { perm } from '../../../sidecar/src/access/host-routes.js'
import { behaviourEntry } from '../../../sidecar/src/kernel/behaviours.js'
import { replaced, type RouteBehaviour } from '../../../sidecar/src/kernel/behaviour.js'
import type { Feature } from '../../../sidecar/src/kernel/feature.js'
import type { Services } from '../../../sidecar/src/services.js'

interface EchoState {
  owner: string
  asked: string
}

function echoBehaviour(): RouteBehaviour<EchoState> {
  return {
    decide({ desc, pass, owner, steps }) {
      return { ...pass, filter: steps.filter('echo', { owner, asked: new URLSearchParams(desc.query).get('say') ?? '' }) }
    },
    filter(state, msg, payload) {
      if (msg.status !== 200) return { action: 'keep' }
      return replaced(JSON.stringify({ owner: state.owner, said: state.asked, host: payload.toString('utf8') }))
    },
  }
}

export function echoFeature(services: Pick<Services, 'users'>): Feature {
  return {
    name: 'echo',
    hostRoutes: { 'GET /echo_host': { require: perm('can_access_api'), behaviour: 'echo-host' } },
    routes: async (family) => {
      family.get('/api/echo', { config: { auth: 'user' } }, async (request) => ({ username: request.principal?.username, users: services.users.count }))
    },
    bind: () => ({ behaviours: [behaviourEntry('echo-host', echoBehaviour())] }),
  }
}
