// /loading: a holding page while ComfyUI starts. It goes on to `next` (a same-origin path, as
// the server wrote it into the page) or `/` as soon as the service answers, and to the login page when there is no session.
import { $, api, SESSION_ENDED } from './common.js'

// The server applied its `next` rule (the one /login uses) and wrote the result into the link:
// reading the query here again would be a second rule, and browsers drop tabs and newlines.
const next = $('#continue').getAttribute('href') || '/'

api('/authsvc/api/me')
  .then(() => location.replace(next))
  .catch((error) => {
    if (error.status === 401 && SESSION_ENDED.has(error.code)) location.replace(`/login?next=${encodeURIComponent(next)}`)
    else $('#status').textContent = `${error.message} You can try the link below.`
  })
