// The permissions of a role in words: one place for every page that names them (the admin
// panel's Roles section, a user's page, the Models section). Each says what it allows and what
// turning it off costs (`allows` and `off` to an admin; `mine` and `mineOff` to the user on their
// account page); the keys are those of authsvc_groups.json (SPEC §4).

/** In the order the Roles section shows them. */
export const PERMISSIONS = [
  {
    key: 'can_access_api',
    name: 'Use ComfyUI',
    allows: 'Open ComfyUI and read what it lists: models, nodes, the queue and history, workflows.',
    off: 'ComfyUI opens but cannot load its lists, and scripts are refused; only their account page is left.',
    mine: 'Open ComfyUI and read what it lists: models, nodes, the queue and history, workflows.',
    mineOff: "You cannot load ComfyUI's lists or use scripts; only this page is yours.",
  },
  {
    key: 'can_run',
    name: 'Run prompts',
    allows: 'Queue prompts, and interrupt or clear their own.',
    off: 'They can look at workflows but never generate anything.',
    mine: 'Queue prompts, and interrupt or clear your own.',
    mineOff: 'You can look at workflows but not generate anything.',
  },
  {
    key: 'can_upload',
    name: 'Upload images',
    allows: 'Upload images and masks to use in their prompts.',
    off: 'They can only use images already on the server or made by their own prompts.',
    mine: 'Upload images and masks to use in your prompts.',
    mineOff: 'You can use only images already on the server or made by your own prompts.',
  },
  {
    key: 'can_modify_workflows',
    name: 'Save workflows',
    allows: 'Save, rename and delete their own workflows.',
    off: 'They can open workflows but not keep a change.',
    mine: 'Save, rename and delete your own workflows.',
    mineOff: 'You can open workflows but not keep a change.',
  },
  {
    key: 'can_have_api_tokens',
    name: 'Create API tokens',
    allows: 'Create API tokens for scripts and apps.',
    off: 'No new token can be made; tokens they already have keep working until revoked or expired.',
    mine: 'Create API tokens for scripts and apps.',
    mineOff: 'You cannot create API tokens; ones you already have keep working.',
  },
  {
    key: 'can_view_all_comfyui_items',
    name: 'See every model',
    allows: 'See and use every model on the server, whatever the grants say.',
    off: 'They see and use only the models granted to them in the Models section, and none until some are granted.',
    mine: 'See and use every model on the server.',
    mineOff: 'You see and use only the models an administrator granted to you or to your role.',
  },
  {
    key: 'can_download_models',
    name: 'Download models',
    allows: 'Download models from Civitai or Hugging Face into the model folders.',
    off: 'Only an administrator adds models.',
    mine: 'Download models from Civitai or Hugging Face into the model folders.',
    mineOff: 'Only an administrator adds models.',
  },
  {
    key: 'mfa_required',
    name: 'Require two-factor',
    allows: 'Members must set up two-factor authentication before they can use anything.',
    off: 'Two-factor stays each member\'s own choice.',
    mine: 'Your role requires two-factor authentication.',
    mineOff: 'Two-factor authentication is your own choice.',
  },
]

export const PERMISSION_BY_KEY = Object.fromEntries(PERMISSIONS.map((p) => [p.key, p]))

/** The name of a permission key in words; an unknown key as it is. */
export const permissionName = (key) => PERMISSION_BY_KEY[key]?.name ?? key

/**
 * Warnings for a role's permissions: a setting that makes another one inert. Each is
 * `{ key, text }`, `key` being the setting that causes it.
 */
export function roleWarnings(role, keys) {
  const out = []
  if (role === 'admin') return out
  if (keys.can_view_all_comfyui_items) {
    out.push({ key: 'can_view_all_comfyui_items', text: `"See every model" is on: model grants do nothing for the ${role} role until it is turned off.` })
  }
  if (!keys.can_access_api && (keys.can_run || keys.can_upload || keys.can_modify_workflows)) {
    out.push({ key: 'can_access_api', text: `"Use ComfyUI" is off: ${role} members cannot load ComfyUI's lists, so running, uploading and saving are of little use to them.` })
  }
  return out
}
