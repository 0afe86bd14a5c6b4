/** The daemon's protocol module: the only part of trainer-daemon/ that other processes import. */
export * from './records';
export * from './rpc';
export * from './daemon';
export * from './agentEnv';
export * from './lightningrl';
export * from './validation';
export * from './apo';
export * from './promptEdit';
export * from './rewards';
export * from './trainer';
export * from './training';
export * from './policy';
export * from './llmApis';
export * from './placement';
export * from './outcome';
export * from './outcomeSchema';
