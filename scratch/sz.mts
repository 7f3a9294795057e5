import { testPng } from '../test/helpers/nsfw-images.js'
console.log(testPng(42, { size: 512 }).length)
