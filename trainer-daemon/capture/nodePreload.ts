/**
 * The entry of `dist/capture-preload.js`, preloaded into a rollout's Node processes: routes their `fetch`
 * calls to the providers' own hosts through the rollout URL (fetchRouting.ts).
 */
import { installFetchRouting } from './fetchRouting';

installFetchRouting();
